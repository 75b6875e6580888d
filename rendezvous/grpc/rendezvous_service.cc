#include "rendezvous/grpc/rendezvous_service.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/security.h"
#include "common/standby.h"
#include "rendezvous/grpc/reactors.h"
#include "rendezvous/grpc/requests.h"
#include "rendezvous/grpc/watch_reactor.h"
#include "proto/wire.h"

namespace meshrun::rendezvous {
namespace {

namespace pb = ::meshrun::v1;

constexpr const char* kMethodNames[] = {
    "Join", "Heartbeat", "Watch", "ReportFailure", "ReportFinished", "KvSet", "KvGet", "KvAdd",
    "KvCompareSet", "KvCheck", "KvDelete", "KvMultiGet", "KvMultiSet", "KvWait", "KvBatch", "Status"};
static_assert(sizeof(kMethodNames) / sizeof(kMethodNames[0]) == RendezvousService::kNumMethods);

using wire::FromProto;
using wire::ToGrpc;
using wire::ToProto;

}  // namespace

RendezvousService::RendezvousService(RunRegistry* registry, std::string token, ServerMetrics* metrics,
                                     const ServerLimits& limits, TrafficCounters* traffic)
    : registry_(registry), token_(std::move(token)), limits_(limits), metrics_(metrics), traffic_(traffic) {}

int RendezvousService::open_watchers() {
  absl::MutexLock lock(&watch_mu_);
  return open_watches_;
}

void RendezvousService::WatchStarted() {
  absl::MutexLock lock(&watch_mu_);
  ++open_watches_;
}

void RendezvousService::WatchEnded() {
  absl::MutexLock lock(&watch_mu_);
  // The last agent left: what its connections held can go back.
  if (--open_watches_ == 0 && releaser_ != nullptr) releaser_->Request();
}

bool RendezvousService::WaitForNoWatchers(absl::Duration timeout) {
  absl::MutexLock lock(&watch_mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_) { return open_watches_ == 0; };
  return watch_mu_.AwaitWithTimeout(absl::Condition(&none), timeout);
}

void RendezvousService::Count(Method m, const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      refused_[m].fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      counts_[m].fetch_add(1, std::memory_order_relaxed);
  }
}

grpc::ServerUnaryReactor* RendezvousService::Reply(Method m, grpc::CallbackServerContext* ctx, const grpc::Status& s) {
  Count(m, s);
  return Answer(ctx, s);
}

grpc::Status RendezvousService::Admit(Method m, const google::protobuf::Message& req, const pb::RunRef& run,
                                      bool need_run_id) {
  if (absl::Status s = wire::CheckWellFormed(req); !s.ok()) return ToGrpc(s);
  grpc::Status admitted = ToGrpc(requests::Admit(token_, run, need_run_id, limits_));
  // A standby replica answers everything but Status with who leads
  // (common/standby.h), once the token was checked.
  if (admitted.ok() && gate_ != nullptr && m != kStatus && !gate_->serving()) {
    return ToGrpc(StandbyStatus(gate_->Refusal(), gate_->leader()));
  }
  return admitted;
}

void RendezvousService::CheckOpenFiles(int64_t max_nodes) {
  int64_t warned = warned_nodes_.load(std::memory_order_relaxed);
  if (open_files_.soft == 0 || max_nodes <= warned) return;
  const uint64_t needed = DescriptorsNeeded(max_nodes, 0);
  if (needed <= open_files_.soft || !warned_nodes_.compare_exchange_strong(warned, max_nodes)) return;
  Logger("rdzv")->warn("{}", OpenFilesWarning(open_files_, needed,
                                              absl::StrCat("a run with --nnodes MAX=", max_nodes)));
}

grpc::ServerUnaryReactor* RendezvousService::Join(grpc::CallbackServerContext* ctx,
                                                  const pb::JoinRequest* req, pb::JoinResponse* resp) {
  if (auto s = Admit(kJoin, *req, req->run()); !s.ok()) return Reply(kJoin, ctx, s);
  absl::StatusOr<requests::JoinArgs> args = requests::JoinFromProto(*req, wire::PeerIp(ctx->peer()), limits_);
  if (!args.ok()) return Reply(kJoin, ctx, ToGrpc(args.status()));
  absl::StatusOr<std::shared_ptr<Run>> run = registry_->ForJoin(req->run().run_id(), req->last_round(), ctx->peer());
  if (!run.ok()) return Reply(kJoin, ctx, ToGrpc(run.status()));
  CheckOpenFiles(args->config.max_nodes);
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  // A join answered on the node's stream is over for this call: its
  // cancellation (after the answer) withdraws nothing.
  auto on_stream = std::make_shared<std::atomic<bool>>(false);
  reactor->SetOnCancel([run = *run, id = args->node.node_id, on_stream] {
    if (!on_stream->load()) run->CancelJoin(id);
  });
  const bool answered_on_stream = (*run)->Join(
      args->node, args->config, req->last_round(), req->session(),
      [this, reactor, resp](absl::StatusOr<Assignment> a) {
        // A round closed: its parked joins are being answered.
        if (a.ok() && releaser_ != nullptr) releaser_->Request();
        Count(kJoin, ToGrpc(a.status()));
        // The call may have ended (its client cancelled, and the
        // run answers only now): then `resp` is gone.
        if (!reactor->Claim()) return;
        if (a.ok()) ToProto(*a, resp->mutable_assignment());
        reactor->Finish(ToGrpc(a.status()));
      },
      ctx->peer(),
      req->answer_on_stream() ? Run::JoinCallback([this](absl::StatusOr<Assignment> a) {
        if (a.ok() && releaser_ != nullptr) releaser_->Request();
        Count(kJoin, ToGrpc(a.status()));
      })
                              : Run::JoinCallback(nullptr));
  if (answered_on_stream) {
    on_stream->store(true);
    if (reactor->Claim()) {
      resp->set_on_stream(true);
      reactor->Finish(grpc::Status::OK);
    }
  }
  return reactor.get();
}

grpc::ServerUnaryReactor* RendezvousService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                       const pb::HeartbeatRequest* req,
                                                       pb::HeartbeatResponse* resp) {
  if (auto s = Admit(kHeartbeat, *req, req->run()); !s.ok()) return Reply(kHeartbeat, ctx, s);
  std::shared_ptr<Run> run = registry_->Find(req->run().run_id());
  if (!run) return Reply(kHeartbeat, ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "no such run"));
  absl::StatusOr<int64_t> round = run->Heartbeat(req->node_id(), req->session());
  if (!round.ok()) return Reply(kHeartbeat, ctx, ToGrpc(round.status()));
  resp->set_current_round(*round);
  return Reply(kHeartbeat, ctx, grpc::Status::OK);
}

grpc::ServerWriteReactor<pb::RunEvent>* RendezvousService::Watch(grpc::CallbackServerContext* ctx,
                                                                 const pb::WatchRequest* req) {
  grpc::Status s = Admit(kWatch, *req, req->run());
  if (s.ok()) s = ToGrpc(requests::CheckWatch(*req, limits_));
  absl::StatusOr<std::shared_ptr<Run>> run = absl::UnknownError("");
  if (s.ok()) {
    run = registry_->ForJoin(req->run().run_id(), req->known_round(), ctx->peer());
    s = ToGrpc(run.status());
  }
  if (!s.ok()) {
    Count(kWatch, s);
    return new RefusedStream<pb::RunEvent>(s);
  }
  grpc::ServerWriteReactor<pb::RunEvent>* reactor =
      StartWatch(ctx, *run, req->node_id(), this, limits_, req->known_round(), req->session(), &s);
  Count(kWatch, s);
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousService::ReportFailure(grpc::CallbackServerContext* ctx,
                                                           const pb::ReportFailureRequest* req,
                                                           pb::ReportFailureResponse* resp) {
  if (auto s = Admit(kReportFailure, *req, req->run()); !s.ok()) return Reply(kReportFailure, ctx, s);
  std::shared_ptr<Run> run = registry_->Find(req->run().run_id());
  if (!run) return Reply(kReportFailure, ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "no such run"));
  absl::StatusOr<FailureVerdict> v = run->ReportFailure(FromProto(req->failure()), req->session());
  if (!v.ok()) return Reply(kReportFailure, ctx, ToGrpc(v.status()));
  if (metrics_ != nullptr && v->is_root_cause) {
    metrics_->RecordFailure(v->root_cause.permanent ? "permanent" : v->root_cause.signal > 0 ? "signal" : "exit_code");
  }
  resp->set_decision(v->decision == Decision::kRestart ? pb::ReportFailureResponse::RESTART
                                                       : pb::ReportFailureResponse::STOP);
  resp->set_next_round(v->next_round);
  ToProto(v->root_cause, resp->mutable_root_cause());
  resp->set_is_root_cause(v->is_root_cause);
  return Reply(kReportFailure, ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RendezvousService::ReportFinished(grpc::CallbackServerContext* ctx,
                                                            const pb::ReportFinishedRequest* req,
                                                            pb::ReportFinishedResponse* resp) {
  if (auto s = Admit(kReportFinished, *req, req->run()); !s.ok()) return Reply(kReportFinished, ctx, s);
  std::shared_ptr<Run> run = registry_->Find(req->run().run_id());
  if (!run) return Reply(kReportFinished, ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "no such run"));
  const absl::StatusOr<absl::Duration> timeout = requests::BarrierTimeout(*req, limits_);
  if (!timeout.ok()) return Reply(kReportFinished, ctx, ToGrpc(timeout.status()));
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  uint64_t id = run->ReportFinished(
      req->node_id(), req->round(), req->session(), *timeout,
      [this, reactor, resp](absl::StatusOr<BarrierResult> r) {
        Count(kReportFinished, ToGrpc(r.status()));
        if (!reactor->Claim()) return;  // The call ended: `resp` is gone.
        if (r.ok()) {
          resp->set_all_finished(r->all_finished);
          resp->set_finished_nodes(r->finished_nodes);
          resp->set_node_count(r->node_count);
        }
        reactor->Finish(ToGrpc(r.status()));
      });
  if (id != 0) reactor->SetOnCancel([run, id] { run->CancelFinished(id); });
  return reactor.get();
}

grpc::ServerUnaryReactor* RendezvousService::Status(grpc::CallbackServerContext* ctx,
                                                    const pb::StatusRequest* req, pb::StatusResponse* resp) {
  if (auto s = Admit(kStatus, *req, req->run(), /*need_run_id=*/false); !s.ok()) return Reply(kStatus, ctx, s);
  if (req->run().run_id().empty()) {
    for (const RunStatus& r : registry_->Status()) ToProto(r, resp->add_runs());
  } else if (std::optional<RunStatus> r = registry_->StatusOf(req->run().run_id())) {
    // One run costs that run, however many the server holds.
    ToProto(*r, resp->add_runs());
  }
  for (int m = 0; m < kNumMethods; ++m) {
    (*resp->mutable_request_counts())[kMethodNames[m]] = counts_[m].load(std::memory_order_relaxed);
    (*resp->mutable_refused_counts())[kMethodNames[m]] = refused_[m].load(std::memory_order_relaxed);
  }
  if (traffic_ != nullptr) {
    // One run's nodes only, when the request names a run.
    TrafficSnapshot t =
        req->run().run_id().empty() ? traffic_->Snapshot() : traffic_->SnapshotOf(req->run().run_id());
    resp->set_connections_accepted(t.connections_accepted);
    resp->mutable_store_requests_by_node()->insert(t.store_requests_by_node.begin(), t.store_requests_by_node.end());
    resp->mutable_store_keys_read_by_node()->insert(t.store_keys_read_by_node.begin(),
                                                    t.store_keys_read_by_node.end());
  }
  resp->set_port(port_);
  resp->set_version(MESHRUN_VERSION);
  if (gate_ != nullptr) {
    resp->set_replica_role(gate_->serving() ? "leader" : "standby");
    for (const state::ReplicaView& r : gate_->Replicas()) {
      pb::ReplicaInfo* out = resp->add_replicas();
      out->set_id(r.id);
      out->set_address(r.address);
      out->set_leader(r.leader);
    }
  }
  return Answer(ctx, grpc::Status::OK);
}

}  // namespace meshrun::rendezvous
