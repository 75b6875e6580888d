#include "agent/lighthouse/lighthouse_proxy.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/endpoint.h"
#include "proto/types.h"

namespace meshrun::agent {

namespace {

// One forwarded call: the worker's call (this reactor) and the server's
// (ctx, request, response), alive until both are done.
template <typename Request, typename Response>
class ForwardedCall : public grpc::ServerUnaryReactor {
 public:
  ForwardedCall(std::shared_ptr<grpc::ClientContext> ctx, std::shared_ptr<v1::Lighthouse::Stub> stub)
      : ctx_(std::move(ctx)), stub_(std::move(stub)) {}
  Request req;
  Response resp;
  // The worker went away: so does the forwarded call (its answer still
  // comes, CANCELLED, and finishes this one).
  void OnCancel() override { ctx_->TryCancel(); }
  void OnDone() override {
    if (pending_.fetch_sub(1) == 1) delete this;
  }
  // Sends req; `done` fills the worker's response when the answer is OK.
  template <typename Send, typename Done>
  void Start(Send send, Done done) {
    send(stub_.get(), ctx_.get(), &req, &resp, [this, done = std::move(done)](grpc::Status s) mutable {
      if (s.ok()) done(resp);
      Finish(s);
      if (pending_.fetch_sub(1) == 1) delete this;
    });
  }

 private:
  std::shared_ptr<grpc::ClientContext> ctx_;
  std::shared_ptr<v1::Lighthouse::Stub> stub_;
  std::atomic<int> pending_{2};  // gRPC's OnDone and the forwarded call's answer.
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
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
  }
}

void LighthouseProxy::SetUpstream(std::shared_ptr<grpc::Channel> server, std::string node_id) {
  auto stub = std::make_shared<v1::Lighthouse::Stub>(std::move(server));
  absl::MutexLock lock(&mu_);
  stub_ = std::move(stub);
  node_id_ = std::move(node_id);
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
  std::shared_ptr<v1::Lighthouse::Stub> stub;
  std::shared_ptr<grpc::ClientContext> up = NewContext(ctx, &stub);
  auto* call = new ForwardedCall<v1::LighthouseQuorumRequest, v1::LighthouseQuorumResponse>(up, stub);
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
      });
  return call;
}

grpc::ServerUnaryReactor* LighthouseProxy::Heartbeat(grpc::CallbackServerContext* ctx,
                                                     const torchft::LighthouseHeartbeatRequest* req,
                                                     torchft::LighthouseHeartbeatResponse*) {
  std::shared_ptr<v1::Lighthouse::Stub> stub;
  std::shared_ptr<grpc::ClientContext> up = NewContext(ctx, &stub);
  auto* call = new ForwardedCall<v1::LighthouseHeartbeatRequest, v1::LighthouseHeartbeatResponse>(up, stub);
  v1::RunRef* run = call->req.mutable_run();
  Fill(run, call->req.mutable_settings());
  call->req.set_replica_id(req->replica_id());
  call->Start(
      [](v1::Lighthouse::Stub* s, grpc::ClientContext* c, const v1::LighthouseHeartbeatRequest* q,
         v1::LighthouseHeartbeatResponse* r, std::function<void(grpc::Status)> f) { s->async()->Heartbeat(c, q, r, f); },
      [](const v1::LighthouseHeartbeatResponse&) {});
  return call;
}

}  // namespace meshrun::agent
