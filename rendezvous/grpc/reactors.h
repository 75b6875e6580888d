// Small gRPC reactors the server's handlers share (rendezvous_service.cc,
// store_service.cc). Internal to the server's gRPC adapter.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "rendezvous/policy/memory_budget.h"

namespace meshrun::rendezvous {

// The outcome of a store write whose answer may come later, on another
// thread (KvStore answers a write once it is saved). Read right after the
// call, it tells a refusal at once (OK: applied, or answered OK).
class WriteOutcome {
 public:
  void Set(absl::Status s) {
    absl::MutexLock lock(&mu_);
    status_ = std::move(s);
  }
  absl::Status Get() {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// A unary reactor that the domain answers later, from any thread, exactly
// once; on client cancellation it runs `on_cancel` (which should lead to an
// answer) and ends the call CANCELLED. Owned jointly by gRPC (until OnDone)
// and the domain's callback (until it has run or is dropped), so a callback
// that comes after the call ended (a cancelled Join the run answers only
// at shutdown) finds the reactor alive; it must Claim() before touching the
// response, which gRPC frees once the call ended.
class ParkedReactor : public grpc::ServerUnaryReactor {
 public:
  static std::shared_ptr<ParkedReactor> Create() {
    std::shared_ptr<ParkedReactor> r(new ParkedReactor());
    r->self_ = r;
    return r;
  }
  // True for the first caller only: it may fill the response, and must then
  // call Finish. False once the call was answered or cancelled.
  bool Claim() { return !finished_.exchange(true); }
  void Complete(const grpc::Status& s) {
    if (Claim()) Finish(s);
  }
  // Keeps `charge` (what the parked call holds) until the call is done.
  void Hold(HeldCharge charge) {
    absl::MutexLock lock(&mu_);
    held_ = std::move(charge);
  }
  void SetOnCancel(absl::AnyInvocable<void()> fn) {
    absl::MutexLock lock(&mu_);
    on_cancel_ = std::move(fn);
  }
  void OnCancel() override {
    absl::AnyInvocable<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      fn = std::move(on_cancel_);
    }
    if (fn) fn();
    // The domain answered already, or had nothing parked: end the call.
    Complete(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }
  void OnDone() override {
    std::shared_ptr<ParkedReactor> self;
    HeldCharge held;
    {
      absl::MutexLock lock(&mu_);
      self = std::move(self_);
      on_cancel_ = nullptr;
      held = std::move(held_);
    }
    // Freed here unless a domain callback still holds it.
  }

 private:
  ParkedReactor() = default;
  std::atomic<bool> finished_{false};
  absl::Mutex mu_;
  absl::AnyInvocable<void()> on_cancel_ ABSL_GUARDED_BY(mu_);
  HeldCharge held_ ABSL_GUARDED_BY(mu_);  // Given back at OnDone.
  std::shared_ptr<ParkedReactor> self_;  // gRPC's share, until OnDone.
};

// A server stream refused at once: ends with `s`, writes nothing; deletes
// itself when gRPC is done with it.
template <typename Message>
class RefusedStream : public grpc::ServerWriteReactor<Message> {
 public:
  explicit RefusedStream(const grpc::Status& s) { this->Finish(s); }
  void OnDone() override { delete this; }
};

// Answers a unary call at once with `s`. Thread-safe.
inline grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, const grpc::Status& s) {
  auto* r = ctx->DefaultReactor();
  r->Finish(s);
  return r;
}

}  // namespace meshrun::rendezvous
