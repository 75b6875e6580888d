// A worker's call that the store proxy answers later (ProxyReactor), and a
// worker's request that it sends on to the server as it is (ForwardedCall):
// with the agent's token and node id and the worker's own deadline, and,
// when the server went away and the request may be sent twice, kept for the
// next leader (GrpcUpstream::KeepCall).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "agent/kept_calls.h"
#include "agent/store_proxy/store_upstream.h"

namespace meshrun::agent {

// A worker's call answered later, from any thread, exactly once (by
// Complete); its cancellation (the worker went away, or its deadline
// passed) runs the function that leads to Complete.
class ProxyReactor : public grpc::ServerUnaryReactor {
 public:
  void Complete(const grpc::Status& s) {
    if (!finished_.exchange(true)) Finish(s);
  }
  // Runs `fn` on cancellation (at once when the call was cancelled already).
  void SetOnCancel(absl::AnyInvocable<void()> fn) {
    {
      absl::MutexLock lock(&mu_);
      if (!cancelled_) {
        on_cancel_ = std::move(fn);
        return;
      }
    }
    fn();
  }
  void OnCancel() override {
    absl::AnyInvocable<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      fn = std::move(on_cancel_);
    }
    if (fn) fn();
  }
  void OnDone() override { delete this; }

 private:
  std::atomic<bool> finished_{false};
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::AnyInvocable<void()> on_cancel_ ABSL_GUARDED_BY(mu_);
};

// One worker request sent on to the server: `StubT` is GrpcUpstream::Stub
// (the Store service) or v1::Admin::Stub. Answers `reactor` exactly once:
// with the server's answer; or, when the request is `resend_safe` (its
// repetition changes nothing more: a set, a delete, a read, an add or a
// compare-set with a request id) and met a server
// gone away (UNAVAILABLE), once it was sent again to the next leader (or
// on the same connection when none is named within the upstream's
// kept_retry; within the worker's deadline); or CANCELLED as
// soon as the worker's call is cancelled or its deadline passes, kept or
// not, so that no kept call outlives its worker or holds up the proxy's
// gRPC server at exit.
template <typename StubT, typename Req, typename Resp>
class ForwardedCall : public std::enable_shared_from_this<ForwardedCall<StubT, Req, Resp>> {
 public:
  // Sends `req` with `stub`'s method on `ctx`; `done` gets the answer.
  using Method = std::function<void(StubT*, grpc::ClientContext*, const Req*, Resp*, std::function<void(grpc::Status)>)>;
  // Sees every answer the worker gets, before the worker does.
  using Answered = std::function<void(const grpc::Status&)>;

  // Sends `req` now and answers `reactor` (whose OnCancel it takes over)
  // with `*resp` filled. `deadline`: the worker's (max() for none).
  static void Start(GrpcUpstream* upstream, ProxyReactor* reactor, Req req, Resp* resp,
                    std::chrono::system_clock::time_point deadline, bool resend_safe, Method method,
                    Answered answered) {
    std::shared_ptr<ForwardedCall> call(new ForwardedCall(upstream, reactor, std::move(req), resp, deadline,
                                                          resend_safe, std::move(method), std::move(answered)));
    call->Send();
    reactor->SetOnCancel([call] { call->OnWorkerCancel(); });
  }

 private:
  ForwardedCall(GrpcUpstream* upstream, ProxyReactor* reactor, Req req, Resp* resp,
                std::chrono::system_clock::time_point deadline, bool resend_safe, Method method, Answered answered)
      : upstream_(upstream),
        reactor_(reactor),
        req_(std::move(req)),
        resp_(resp),
        deadline_(deadline),
        resend_safe_(resend_safe),
        method_(std::move(method)),
        answered_(std::move(answered)) {}

  void Send() {
    grpc::ClientContext* ctx = nullptr;
    StubT* stub = nullptr;
    {
      absl::MutexLock lock(&mu_);
      ctx_ = upstream_->NewContext(deadline_, &stub_);
      if (cancelled_) ctx_->TryCancel();
      ctx = ctx_.get();
      stub = stub_.get();
    }
    method_(stub, ctx, &req_, resp_,
            [self = this->shared_from_this(), stub](grpc::Status s) { self->OnAnswer(stub, std::move(s)); });
  }

  void OnAnswer(StubT* stub, grpc::Status s) {
    if constexpr (std::is_same_v<StubT, GrpcUpstream::Stub>) {
      if (Hold(s)) {
        const bool kept = upstream_->KeepCall(
            stub, [self = this->shared_from_this(), s](bool resend) { self->Release(resend, s); });
        if (kept || !Unhold()) {
          upstream_->CallEnded();  // Kept, or answered by OnWorkerCancel meanwhile.
          return;
        }
      }
    }
    Answer(s);
    upstream_->CallEnded();
  }

  // True, and the call held, when `s` lets it wait for the next leader.
  bool Hold(const grpc::Status& s) {
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE || !resend_safe_ || resends_ >= KeptCalls::kMaxSends ||
        std::chrono::system_clock::now() >= deadline_) {
      return false;
    }
    absl::MutexLock lock(&mu_);
    if (cancelled_) return false;
    ++resends_;
    held_ = true;
    return true;
  }
  // Ends the hold; false when OnWorkerCancel ended it (and answered).
  bool Unhold() {
    absl::MutexLock lock(&mu_);
    const bool was = held_;
    held_ = false;
    return was;
  }
  // GrpcUpstream's verdict on a kept call: send it again, or answer `s`.
  void Release(bool resend, const grpc::Status& s) {
    if (!Unhold()) return;
    if (resend) {
      Send();
    } else {
      Answer(s);
    }
  }
  void OnWorkerCancel() {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      if (ctx_) ctx_->TryCancel();
      if (!held_) return;  // The call in flight ends, CANCELLED, and answers.
      held_ = false;
    }
    Answer(grpc::Status(grpc::StatusCode::CANCELLED,
                        "the worker's call ended (cancelled, or its deadline passed) while the store proxy waited "
                        "for the next leader"));
  }
  void Answer(const grpc::Status& s) {
    answered_(s);
    reactor_->Complete(s);
  }

  GrpcUpstream* const upstream_;
  ProxyReactor* const reactor_;  // Valid until answered: gRPC deletes it after.
  Req req_;
  Resp* const resp_;  // The worker's response, valid until answered.
  const std::chrono::system_clock::time_point deadline_;
  const bool resend_safe_;
  const Method method_;
  const Answered answered_;
  int resends_ = 0;  // Only OnAnswer (one answer at a time) touches it.
  absl::Mutex mu_;
  std::shared_ptr<grpc::ClientContext> ctx_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<StubT> stub_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool held_ ABSL_GUARDED_BY(mu_) = false;  // Kept by the upstream for the next leader.
};

}  // namespace meshrun::agent
