#include "rendezvous/grpc/rendezvous_service.h"

#include "absl/strings/str_cat.h"
#include "rendezvous/grpc/reactors.h"
#include "rendezvous/grpc/requests.h"
#include "rendezvous/grpc/watch_reactor.h"
#include "proto/wire.h"

namespace meshrun::rendezvous {
namespace {

namespace pb = ::meshrun::v1;
using wire::FromProto;
using wire::ToGrpc;
using wire::ToProto;
using M = ServiceCore::Method;

}  // namespace

grpc::ServerUnaryReactor* RendezvousService::Join(grpc::CallbackServerContext* ctx,
                                                  const pb::JoinRequest* req, pb::JoinResponse* resp) {
  if (auto s = core_->Admit(M::kJoin, *req, req->run()); !s.ok()) return core_->Reply(M::kJoin, ctx, s);
  absl::StatusOr<requests::JoinArgs> args = requests::JoinFromProto(*req, wire::PeerIp(ctx->peer()), core_->limits());
  if (!args.ok()) return core_->Reply(M::kJoin, ctx, ToGrpc(args.status()));
  absl::StatusOr<std::shared_ptr<Run>> run = core_->registry()->ForJoin(req->run().run_id(), req->last_round(), ctx->peer());
  if (!run.ok()) return core_->Reply(M::kJoin, ctx, ToGrpc(run.status()));
  core_->CheckOpenFiles(args->config.max_nodes);
  // A join not answered on its node's stream may park its call until the
  // round closes: charged as one (anyone's: agents join on their streams).
  HeldCharge parked;
  if (MemoryBudget* budget = core_->memory_budget(); budget != nullptr && !req->answer_on_stream()) {
    absl::Status s = budget->Charge(HeldKind::kParkedJoin, 1, kParkedJoinCost, Claimant::kOther,
                                    absl::StrCat("a join of node '", args->node.node_id.substr(0, 64), "' to run '",
                                                 req->run().run_id().substr(0, 64), "' that would wait for its round"));
    if (!s.ok()) return core_->Reply(M::kJoin, ctx, ToGrpc(s));
    parked = HeldCharge(budget, HeldKind::kParkedJoin, 1, kParkedJoinCost);
  }
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  reactor->Hold(std::move(parked));
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
        if (a.ok() && core_->memory_releaser() != nullptr) core_->memory_releaser()->Request();
        core_->Count(M::kJoin, ToGrpc(a.status()));
        // The call may have ended (its client cancelled, and the
        // run answers only now): then `resp` is gone.
        if (!reactor->Claim()) return;
        if (a.ok()) ToProto(*a, resp->mutable_assignment());
        reactor->Finish(ToGrpc(a.status()));
      },
      ctx->peer(),
      req->answer_on_stream() ? Run::JoinCallback([this](absl::StatusOr<Assignment> a) {
        if (a.ok() && core_->memory_releaser() != nullptr) core_->memory_releaser()->Request();
        core_->Count(M::kJoin, ToGrpc(a.status()));
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
  if (auto s = core_->Admit(M::kHeartbeat, *req, req->run()); !s.ok()) return core_->Reply(M::kHeartbeat, ctx, s);
  std::shared_ptr<Run> run = core_->registry()->Find(req->run().run_id());
  if (!run) return core_->Reply(M::kHeartbeat, ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "no such run"));
  absl::StatusOr<int64_t> round = run->Heartbeat(req->node_id(), req->session());
  if (!round.ok()) return core_->Reply(M::kHeartbeat, ctx, ToGrpc(round.status()));
  resp->set_current_round(*round);
  return core_->Reply(M::kHeartbeat, ctx, grpc::Status::OK);
}

grpc::ServerWriteReactor<pb::RunEvent>* RendezvousService::Watch(grpc::CallbackServerContext* ctx,
                                                                 const pb::WatchRequest* req) {
  grpc::Status s = core_->Admit(M::kWatch, *req, req->run());
  if (s.ok()) s = ToGrpc(requests::CheckWatch(*req, core_->limits()));
  absl::StatusOr<std::shared_ptr<Run>> run = absl::UnknownError("");
  if (s.ok()) {
    run = core_->registry()->ForJoin(req->run().run_id(), req->known_round(), ctx->peer());
    s = ToGrpc(run.status());
  }
  if (!s.ok()) {
    core_->Count(M::kWatch, s);
    return new RefusedStream<pb::RunEvent>(s);
  }
  grpc::ServerWriteReactor<pb::RunEvent>* reactor =
      StartWatch(ctx, *run, req->node_id(), core_, core_->limits(), req->known_round(), req->session(), &s);
  core_->Count(M::kWatch, s);
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousService::ReportFailure(grpc::CallbackServerContext* ctx,
                                                           const pb::ReportFailureRequest* req,
                                                           pb::ReportFailureResponse* resp) {
  if (auto s = core_->Admit(M::kReportFailure, *req, req->run()); !s.ok()) return core_->Reply(M::kReportFailure, ctx, s);
  std::shared_ptr<Run> run = core_->registry()->Find(req->run().run_id());
  if (!run) return core_->Reply(M::kReportFailure, ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "no such run"));
  // Answered once the verdict's change is saved (off gRPC's threads).
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  run->ReportFailure(FromProto(req->failure()), req->session(),
                     [this, reactor, resp](absl::StatusOr<FailureVerdict> v) {
                       const grpc::Status status = ToGrpc(v.status());
                       core_->Count(M::kReportFailure, status);
                       if (v.ok() && core_->metrics() != nullptr && v->is_root_cause) {
                         core_->metrics()->RecordFailure(v->root_cause.permanent ? "permanent"
                                                         : v->root_cause.signal > 0 ? "signal"
                                                                                    : "exit_code");
                       }
                       if (!reactor->Claim()) return;  // The call ended: `resp` is gone.
                       if (v.ok()) {
                         resp->set_decision(v->decision == Decision::kRestart ? pb::ReportFailureResponse::RESTART
                                                                              : pb::ReportFailureResponse::STOP);
                         resp->set_next_round(v->next_round);
                         ToProto(v->root_cause, resp->mutable_root_cause());
                         resp->set_is_root_cause(v->is_root_cause);
                       }
                       reactor->Finish(status);
                     });
  return reactor.get();
}

grpc::ServerUnaryReactor* RendezvousService::ReportFinished(grpc::CallbackServerContext* ctx,
                                                            const pb::ReportFinishedRequest* req,
                                                            pb::ReportFinishedResponse* resp) {
  if (auto s = core_->Admit(M::kReportFinished, *req, req->run()); !s.ok()) return core_->Reply(M::kReportFinished, ctx, s);
  std::shared_ptr<Run> run = core_->registry()->Find(req->run().run_id());
  if (!run) return core_->Reply(M::kReportFinished, ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "no such run"));
  const absl::StatusOr<absl::Duration> timeout = requests::BarrierTimeout(*req, core_->limits());
  if (!timeout.ok()) return core_->Reply(M::kReportFinished, ctx, ToGrpc(timeout.status()));
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  uint64_t id = run->ReportFinished(
      req->node_id(), req->round(), req->session(), *timeout,
      [this, reactor, resp](absl::StatusOr<BarrierResult> r) {
        core_->Count(M::kReportFinished, ToGrpc(r.status()));
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

grpc::ServerUnaryReactor* RendezvousService::PlaceReplicaGroup(grpc::CallbackServerContext* ctx,
                                                               const pb::PlaceReplicaGroupRequest* req,
                                                               pb::PlaceReplicaGroupResponse* resp) {
  if (auto s = core_->Admit(M::kPlaceReplicaGroup, *req, req->run()); !s.ok()) {
    return core_->Reply(M::kPlaceReplicaGroup, ctx, s);
  }
  if (absl::Status s = requests::CheckPlaceReplicaGroup(*req, core_->limits()); !s.ok()) {
    return core_->Reply(M::kPlaceReplicaGroup, ctx, ToGrpc(s));
  }
  absl::StatusOr<int> group =
      core_->placer()->Place(req->run().run_id(), req->node_id(), req->replica_groups(),
                             req->min_nodes_per_group(), req->max_nodes_per_group());
  if (!group.ok()) return core_->Reply(M::kPlaceReplicaGroup, ctx, ToGrpc(group.status()));
  resp->set_replica_group(*group);
  if (*group >= 0) resp->set_group_run_id(ReplicaGroupPlacer::GroupRunId(req->run().run_id(), *group));
  return core_->Reply(M::kPlaceReplicaGroup, ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RendezvousService::ReplicaGroupStates(grpc::CallbackServerContext* ctx,
                                                                const pb::ReplicaGroupStatesRequest* req,
                                                                pb::ReplicaGroupStatesResponse* resp) {
  if (auto s = core_->Admit(M::kReplicaGroupStates, *req, req->run()); !s.ok()) {
    return core_->Reply(M::kReplicaGroupStates, ctx, s);
  }
  if (absl::Status s = requests::CheckReplicaGroupStates(*req, core_->limits()); !s.ok()) {
    return core_->Reply(M::kReplicaGroupStates, ctx, ToGrpc(s));
  }
  for (const ReplicaGroupState& g : core_->placer()->States(req->run().run_id(), req->replica_groups())) {
    ToProto(g, resp->add_groups());
  }
  return core_->Reply(M::kReplicaGroupStates, ctx, grpc::Status::OK);
}

}  // namespace meshrun::rendezvous
