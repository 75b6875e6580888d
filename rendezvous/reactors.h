// Small gRPC reactors the server's handlers share (rendezvous_service.cc,
// store_service.cc). Internal to the server's gRPC adapter.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace meshrun::rendezvous {

// A unary reactor that may finish later, from any thread, exactly once; on
// client cancellation it runs `on_cancel` (which must lead to Complete).
class ParkedReactor : public grpc::ServerUnaryReactor {
 public:
  void Complete(const grpc::Status& s) {
    if (!finished_.exchange(true)) Finish(s);
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
  void OnDone() override { delete this; }

 private:
  std::atomic<bool> finished_{false};
  absl::Mutex mu_;
  absl::AnyInvocable<void()> on_cancel_ ABSL_GUARDED_BY(mu_);
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
