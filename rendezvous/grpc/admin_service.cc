#include "rendezvous/grpc/admin_service.h"

#include "proto/wire.h"
#include "rendezvous/grpc/reactors.h"
#include "rendezvous/run/replica_group_placer.h"

namespace meshrun::rendezvous {

namespace pb = ::meshrun::v1;
using wire::ToProto;
using M = ServiceCore::Method;

grpc::ServerUnaryReactor* AdminService::Status(grpc::CallbackServerContext* ctx, const pb::StatusRequest* req,
                                               pb::StatusResponse* resp) {
  if (auto s = core_->Admit(M::kStatus, *req, req->run(), /*need_run_id=*/false); !s.ok()) {
    return core_->Reply(M::kStatus, ctx, s);
  }
  RunRegistry* registry = core_->registry();
  if (req->run().run_id().empty()) {
    for (const RunStatus& r : registry->Status(req->events())) ToProto(r, resp->add_runs());
  } else {
    // One run costs that run, however many the server holds.
    if (std::optional<RunStatus> r = registry->StatusOf(req->run().run_id(), req->events())) {
      ToProto(*r, resp->add_runs());
    }
    // A job of replica groups (--replica_groups): its groups' runs too, from
    // group 0 to the first one the server does not hold.
    for (int g = 0; g < core_->limits().max_replica_groups; ++g) {
      std::optional<RunStatus> r =
          registry->StatusOf(ReplicaGroupPlacer::GroupRunId(req->run().run_id(), g), req->events());
      if (!r) break;
      ToProto(*r, resp->add_runs());
    }
  }
  for (int i = 0; i < ServiceCore::kNumMethods; ++i) {
    const auto m = static_cast<M>(i);
    (*resp->mutable_request_counts())[ServiceCore::MethodName(m)] = core_->served(m);
    (*resp->mutable_refused_counts())[ServiceCore::MethodName(m)] = core_->refused(m);
  }
  if (TrafficCounters* traffic = core_->traffic()) {
    // One run's nodes only, when the request names a run.
    TrafficSnapshot t = req->run().run_id().empty() ? traffic->Snapshot() : traffic->SnapshotOf(req->run().run_id());
    resp->set_connections_accepted(t.connections_accepted);
    resp->mutable_store_requests_by_node()->insert(t.store_requests_by_node.begin(), t.store_requests_by_node.end());
    resp->mutable_store_keys_read_by_node()->insert(t.store_keys_read_by_node.begin(),
                                                    t.store_keys_read_by_node.end());
  }
  if (lighthouse::LighthouseRegistry* lighthouses = core_->lighthouses()) {
    for (const auto& [id, v] : lighthouses->Views(req->run().run_id())) {
      pb::LighthouseStatus* out = resp->add_lighthouses();
      out->set_run_id(id);
      out->set_quorum_id(v.quorum_id);
      out->set_quorum_members(v.quorum_members);
      out->set_waiting(v.waiting);
      out->set_replica_groups(v.replica_groups);
      out->set_reason(v.reason);
      for (const auto& [replica_id, step] : v.member_steps) {
        pb::LighthouseMemberStep* m = out->add_member_steps();
        m->set_replica_id(replica_id);
        m->set_step(step);
      }
    }
  }
  resp->set_port(core_->port());
  resp->set_version(MESHRUN_VERSION);
  if (const state::ServingGate* gate = core_->gate()) {
    resp->set_replica_role(gate->serving() ? "leader" : "standby");
    resp->set_replica_self(gate->self());
    if (const absl::Time since = gate->leading_since(); since != absl::InfinitePast()) {
      resp->set_leading_since_unix_ms(absl::ToUnixMillis(since));
    }
    for (const state::ReplicaView& r : gate->Replicas()) {
      pb::ReplicaInfo* out = resp->add_replicas();
      out->set_id(r.id);
      out->set_address(r.address);
      out->set_leader(r.leader);
    }
  }
  return Answer(ctx, grpc::Status::OK);
}

}  // namespace meshrun::rendezvous
