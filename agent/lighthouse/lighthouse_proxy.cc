#include "agent/lighthouse/lighthouse_proxy.h"

#include <chrono>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/endpoint.h"
#include "proto/types.h"

namespace meshrun::agent {

namespace {

// One forwarded call: the worker's call (this reactor) and the server's
// (ctx, request, response), alive until both are done. With `keep` (a
// Quorum call, which may be sent twice), an answer UNAVAILABLE (the
// server's leader went away, or the one the agent follows is not serving)
// does not finish it: `keep` holds it until the agent names the next
// leader or kept_retry_ms passes (Resend), the proxy stops (End) or the
// worker's call ends (OnCancel answers it CANCELLED).
template <typename Request, typename Response>
class ForwardedCall : public grpc::ServerUnaryReactor {
 public:
  using SendFn = std::function<void(v1::Lighthouse::Stub*, grpc::ClientContext*, const Request*, Response*,
                                    std::function<void(grpc::Status)>)>;
  using KeepFn = std::function<bool(ForwardedCall*, const v1::Lighthouse::Stub*, const grpc::Status&)>;

  // `held` counts this call until it is freed (the proxy's max_calls).
  ForwardedCall(std::shared_ptr<grpc::ClientContext> ctx, std::shared_ptr<v1::Lighthouse::Stub> stub,
                std::shared_ptr<std::atomic<int64_t>> held)
      : ctx_(std::move(ctx)), stub_(std::move(stub)), calls_held_(std::move(held)) {}
  ~ForwardedCall() override { calls_held_->fetch_sub(1); }
  Request req;
  Response resp;
  // The worker went away or its deadline passed: so does the forwarded
  // call (its answer still comes, CANCELLED, and finishes this one); a call
  // kept for the next leader is answered CANCELLED at once.
  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      ctx_->TryCancel();
      if (!held_) return;
      held_ = false;
    }
    // The kept call's resend function still holds this call: it frees it (Release).
    Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                        "the worker's call ended (cancelled, or its deadline passed) while the agent waited for the "
                        "next leader"));
  }
  void OnDone() override {
    if (pending_.fetch_sub(1) == 1) delete this;
  }
  // Sends req; `done` fills the worker's response when the answer is OK.
  void Start(SendFn send, std::function<void(const Response&)> done, KeepFn keep) {
    send_ = std::move(send);
    done_ = std::move(done);
    keep_ = std::move(keep);
    Send();
  }
  // Ends the wait of a kept call: false when OnCancel answered it meanwhile
  // (this call is then freed, or left to gRPC's OnDone, and must not be
  // touched again by the caller).
  bool Release() {
    {
      absl::MutexLock lock(&mu_);
      if (held_) {
        held_ = false;
        return true;
      }
    }
    if (pending_.fetch_sub(1) == 1) delete this;
    return false;
  }
  // Sends req again on `stub` (the next leader) with `ctx`.
  void Resend(std::shared_ptr<grpc::ClientContext> ctx, std::shared_ptr<v1::Lighthouse::Stub> stub) {
    {
      absl::MutexLock lock(&mu_);
      ctx_ = std::move(ctx);
      stub_ = std::move(stub);
      if (cancelled_) ctx_->TryCancel();
    }
    Send();
  }
  // Answers the worker `s` (a kept call the proxy gives up on).
  void End(const grpc::Status& s) {
    Finish(s);
    if (pending_.fetch_sub(1) == 1) delete this;
  }

 private:
  void Send() {
    grpc::ClientContext* ctx;
    v1::Lighthouse::Stub* stub;
    {
      absl::MutexLock lock(&mu_);
      ctx = ctx_.get();
      stub = stub_.get();
    }
    send_(stub, ctx, &req, &resp, [this, stub](grpc::Status s) {
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE && keep_ && resends_ < KeptCalls::kMaxSends && Hold()) {
        ++resends_;
        if (keep_(this, stub, s) || !Release()) return;
      }
      if (s.ok()) done_(resp);
      End(s);
    });
  }

  // True, and the call held, unless the worker's call was cancelled.
  bool Hold() {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return false;
    held_ = true;
    return true;
  }

  SendFn send_;
  std::function<void(const Response&)> done_;
  KeepFn keep_;
  int resends_ = 0;
  absl::Mutex mu_;
  std::shared_ptr<grpc::ClientContext> ctx_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<v1::Lighthouse::Stub> stub_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool held_ ABSL_GUARDED_BY(mu_) = false;  // Kept for the next leader (keep_).
  std::atomic<int> pending_{2};  // gRPC's OnDone and the forwarded call's answer.
  const std::shared_ptr<std::atomic<int64_t>> calls_held_;
};

// torchft's QuorumMember and meshrun's carry the same fields by the same
// names (proto/torchft.proto, proto/rendezvous.proto): one copy, either way.
template <typename From, typename To>
void CopyMember(const From& m, To* out) {
  out->set_replica_id(m.replica_id());
  out->set_address(m.address());
  out->set_store_address(m.store_address());
  out->set_step(m.step());
  out->set_world_size(m.world_size());
  out->set_shrink_only(m.shrink_only());
  out->set_commit_failures(m.commit_failures());
  out->set_data(m.data());
}

}  // namespace

absl::StatusOr<std::unique_ptr<LighthouseProxy>> LighthouseProxy::Start(LighthouseProxyOptions options,
                                                                        std::shared_ptr<grpc::Channel> server,
                                                                        std::string node_id) {
  std::unique_ptr<LighthouseProxy> p(new LighthouseProxy(std::move(options)));
  p->kept_ = std::make_unique<KeptCalls>(absl::Milliseconds(p->o_.kept_retry_ms));
  p->SetUpstream(std::move(server), std::move(node_id));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(HostPort(p->o_.host, p->o_.port), grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(p.get());
  p->server_ = builder.BuildAndStart();
  if (p->server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("the lighthouse endpoint for torchft cannot listen on ",
                                               HostPort(p->o_.host, p->o_.port)));
  }
  p->address_ = absl::StrCat("http://", HostPort(p->o_.host, port));
  return p;
}

LighthouseProxy::~LighthouseProxy() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  kept_->Stop();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
  }
}

void LighthouseProxy::SetUpstream(std::shared_ptr<grpc::Channel> server, std::string node_id) {
  auto stub = std::make_shared<v1::Lighthouse::Stub>(std::move(server));
  {
    absl::MutexLock lock(&mu_);
    stub_ = std::move(stub);
    node_id_ = std::move(node_id);
  }
  kept_->ResendAll();
}

void LighthouseProxy::SetFollowLeader(bool follow) {
  absl::MutexLock lock(&mu_);
  follow_leader_ = follow;
}

bool LighthouseProxy::Keep(const v1::Lighthouse::Stub* sent_on, std::function<void(bool)> resend) {
  {
    absl::MutexLock lock(&mu_);
    if (!follow_leader_ || stopping_) return false;
    if (stub_.get() == sent_on) {
      kept_->Add(std::move(resend));  // Under mu_: SetUpstream's ResendAll comes after it.
      return true;
    }
  }
  resend(true);  // The next leader is known already.
  return true;
}

bool LighthouseProxy::Admit() {
  if (calls_held_->fetch_add(1) < o_.max_calls) return true;
  calls_held_->fetch_sub(1);
  return false;
}

grpc::ServerUnaryReactor* LighthouseProxy::Refuse(grpc::CallbackServerContext* ctx, const char* what) const {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                         absl::StrCat("the node's lighthouse endpoint holds ", o_.max_calls, " calls already: ", what,
                                      " refused (lighthouse_max_calls=", o_.max_calls, ")")));
  return r;
}

std::shared_ptr<grpc::ClientContext> LighthouseProxy::NewContext(grpc::CallbackServerContext* worker,
                                                                 std::shared_ptr<v1::Lighthouse::Stub>* stub) {
  auto ctx = std::make_shared<grpc::ClientContext>();
  std::chrono::system_clock::time_point deadline = worker->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) {
    deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(o_.default_timeout_ms);
  }
  ctx->set_deadline(deadline);
  absl::MutexLock lock(&mu_);
  ctx->AddMetadata(rendezvous::kNodeMetadataKey, node_id_);
  *stub = stub_;
  return ctx;
}

void LighthouseProxy::Fill(v1::RunRef* run, v1::LighthouseSettings* settings) const {
  run->set_run_id(o_.run_id);
  run->set_token(o_.token);
  settings->set_min_replicas(o_.min_replicas);
  settings->set_join_timeout_ms(o_.join_timeout_ms);
  settings->set_quorum_tick_ms(o_.quorum_tick_ms);
  settings->set_heartbeat_timeout_ms(o_.heartbeat_timeout_ms);
}

grpc::ServerUnaryReactor* LighthouseProxy::Quorum(grpc::CallbackServerContext* ctx,
                                                  const torchft::LighthouseQuorumRequest* req,
                                                  torchft::LighthouseQuorumResponse* resp) {
  if (!Admit()) return Refuse(ctx, "Quorum");
  std::shared_ptr<v1::Lighthouse::Stub> stub;
  std::shared_ptr<grpc::ClientContext> up = NewContext(ctx, &stub);
  auto* call = new ForwardedCall<v1::LighthouseQuorumRequest, v1::LighthouseQuorumResponse>(up, stub, calls_held_);
  Fill(call->req.mutable_run(), call->req.mutable_settings());
  CopyMember(req->requester(), call->req.mutable_requester());
  call->Start(
      [](v1::Lighthouse::Stub* s, grpc::ClientContext* c, const v1::LighthouseQuorumRequest* q,
         v1::LighthouseQuorumResponse* r, std::function<void(grpc::Status)> f) { s->async()->Quorum(c, q, r, f); },
      [resp](const v1::LighthouseQuorumResponse& r) {
        torchft::Quorum* q = resp->mutable_quorum();
        q->set_quorum_id(r.quorum_id());
        for (const v1::QuorumMember& m : r.participants()) CopyMember(m, q->add_participants());
        q->mutable_created()->set_seconds(r.created_unix_ns() / 1'000'000'000);
        q->mutable_created()->set_nanos(static_cast<int32_t>(r.created_unix_ns() % 1'000'000'000));
      },
      [this, ctx](auto* kept, const v1::Lighthouse::Stub* sent_on, const grpc::Status& s) {
        // A quorum call that met a leader gone away waits for the next one
        // (torchft's Manager does not ask again by default: quorum_retries 0).
        return Keep(sent_on, [this, ctx, kept, s](bool resend) {
          if (!kept->Release()) return;  // Answered when the worker's call ended.
          if (!resend) return kept->End(s);
          std::shared_ptr<v1::Lighthouse::Stub> next;
          std::shared_ptr<grpc::ClientContext> up = NewContext(ctx, &next);
          kept->Resend(std::move(up), std::move(next));
        });
      });
  return call;
}

grpc::ServerUnaryReactor* LighthouseProxy::Heartbeat(grpc::CallbackServerContext* ctx,
                                                     const torchft::LighthouseHeartbeatRequest* req,
                                                     torchft::LighthouseHeartbeatResponse*) {
  if (!Admit()) return Refuse(ctx, "Heartbeat");
  std::shared_ptr<v1::Lighthouse::Stub> stub;
  std::shared_ptr<grpc::ClientContext> up = NewContext(ctx, &stub);
  auto* call = new ForwardedCall<v1::LighthouseHeartbeatRequest, v1::LighthouseHeartbeatResponse>(up, stub, calls_held_);
  v1::RunRef* run = call->req.mutable_run();
  Fill(run, call->req.mutable_settings());
  call->req.set_replica_id(req->replica_id());
  call->Start(
      [](v1::Lighthouse::Stub* s, grpc::ClientContext* c, const v1::LighthouseHeartbeatRequest* q,
         v1::LighthouseHeartbeatResponse* r, std::function<void(grpc::Status)> f) { s->async()->Heartbeat(c, q, r, f); },
      [](const v1::LighthouseHeartbeatResponse&) {}, nullptr);
  return call;
}

}  // namespace meshrun::agent
