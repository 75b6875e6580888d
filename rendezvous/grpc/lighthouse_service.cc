#include "rendezvous/grpc/lighthouse_service.h"

#include <memory>
#include <utility>

#include "proto/wire.h"
#include "rendezvous/grpc/reactors.h"
#include "rendezvous/grpc/requests.h"

namespace meshrun::rendezvous {

namespace pb = ::meshrun::v1;
namespace lh = ::meshrun::rendezvous::lighthouse;
using wire::ToGrpc;
using M = ServiceCore::Method;

namespace {

lh::QuorumMember FromProto(const pb::QuorumMember& m) {
  lh::QuorumMember out;
  out.replica_id = m.replica_id();
  out.address = m.address();
  out.store_address = m.store_address();
  out.step = m.step();
  out.world_size = m.world_size();
  out.shrink_only = m.shrink_only();
  out.commit_failures = m.commit_failures();
  out.data = m.data();
  return out;
}

void ToProto(const lh::QuorumMember& m, pb::QuorumMember* out) {
  out->set_replica_id(m.replica_id);
  out->set_address(m.address);
  out->set_store_address(m.store_address);
  out->set_step(m.step);
  out->set_world_size(m.world_size);
  out->set_shrink_only(m.shrink_only);
  out->set_commit_failures(m.commit_failures);
  out->set_data(m.data);
}

// The run's lighthouse, after the door's checks and the settings'. The run
// is found, or made as a store-only run (a lighthouse several jobs share,
// rdzv_conf lighthouse_run), and noted active as a store call notes it.
absl::StatusOr<std::shared_ptr<lh::Lighthouse>> Find(ServiceCore* core, lh::LighthouseRegistry* lighthouses, M m,
                                                     grpc::CallbackServerContext* ctx,
                                                     const google::protobuf::Message& req, const pb::RunRef& run,
                                                     const pb::LighthouseSettings& settings,
                                                     const std::string& replica_id, int64_t member_bytes) {
  if (absl::Status s = core->AdmitStatus(m, req, run); !s.ok()) return s;
  absl::StatusOr<lh::LighthouseSettings> ls = requests::LighthouseSettingsFromProto(settings, replica_id, member_bytes,
                                                                                    core->limits());
  if (!ls.ok()) return ls.status();
  if (absl::StatusOr<std::shared_ptr<Run>> r = core->StoreRun(ctx, run, 0); !r.ok()) return r.status();
  return lighthouses->Get(run.run_id(), *ls);
}

}  // namespace

grpc::ServerUnaryReactor* LighthouseService::Quorum(grpc::CallbackServerContext* ctx,
                                                    const pb::LighthouseQuorumRequest* req,
                                                    pb::LighthouseQuorumResponse* resp) {
  absl::StatusOr<std::shared_ptr<lh::Lighthouse>> l = Find(core_, lighthouses_, M::kLighthouseQuorum, ctx, *req, req->run(),
                                                           req->settings(), req->requester().replica_id(),
                                                           static_cast<int64_t>(req->requester().ByteSizeLong()));
  if (!l.ok()) return core_->Reply(M::kLighthouseQuorum, ctx, ToGrpc(l.status()));
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  absl::StatusOr<uint64_t> ticket = (*l)->Join(
      FromProto(req->requester()), absl::Now(),
      [this, reactor, resp](absl::StatusOr<lh::Quorum> q) {
        core_->Count(M::kLighthouseQuorum, ToGrpc(q.status()));
        if (!reactor->Claim()) return;  // The call ended: its response is gone.
        if (q.ok()) {
          resp->set_quorum_id(q->quorum_id);
          for (const lh::QuorumMember& m : q->participants) ToProto(m, resp->add_participants());
          resp->set_created_unix_ns(absl::ToUnixNanos(q->created));
        }
        reactor->Finish(ToGrpc(q.status()));
      });
  if (!ticket.ok()) {
    core_->Count(M::kLighthouseQuorum, ToGrpc(ticket.status()));
    reactor->Complete(ToGrpc(ticket.status()));
    return reactor.get();
  }
  reactor->SetOnCancel([l = *l, t = *ticket] { l->Cancel(t); });
  return reactor.get();
}

grpc::ServerUnaryReactor* LighthouseService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                       const pb::LighthouseHeartbeatRequest* req,
                                                       pb::LighthouseHeartbeatResponse*) {
  absl::StatusOr<std::shared_ptr<lh::Lighthouse>> l = Find(core_, lighthouses_, M::kLighthouseHeartbeat, ctx, *req,
                                                           req->run(), req->settings(), req->replica_id(), 0);
  if (!l.ok()) return core_->Reply(M::kLighthouseHeartbeat, ctx, ToGrpc(l.status()));
  return core_->Reply(M::kLighthouseHeartbeat, ctx, ToGrpc((*l)->Heartbeat(req->replica_id(), absl::Now())));
}

}  // namespace meshrun::rendezvous
