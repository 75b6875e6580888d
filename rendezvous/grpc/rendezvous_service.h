// The Rendezvous gRPC service (membership: Join, Heartbeat, Watch,
// ReportFailure, ReportFinished): a thin adapter from rendezvous.proto's
// messages to the domain classes of rendezvous/run/ and back. The other two
// services on the same port are store_service.h (the key-value store) and
// admin_service.h (status, replicas); what the three share is
// service_core.h. Thread-safe; holds no state of its own.
#pragma once

#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "rendezvous/grpc/service_core.h"

namespace meshrun::rendezvous {

class RendezvousService final : public ::meshrun::v1::Rendezvous::CallbackService {
 public:
  // `core` must outlive the service.
  explicit RendezvousService(ServiceCore* core) : core_(core) {}

  // Joins the run's open round (Run::Join): answered when the round closes,
  // or at once on the node's event stream when it asks (answer_on_stream).
  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const v1::JoinRequest* req,
                                 v1::JoinResponse* resp) override;
  // Keeps a member alive (Run::Heartbeat); answers at once.
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const v1::HeartbeatRequest* req,
                                      v1::HeartbeatResponse* resp) override;
  // The node's event stream (watch_reactor.h).
  grpc::ServerWriteReactor<v1::RunEvent>* Watch(grpc::CallbackServerContext* ctx,
                                                const v1::WatchRequest* req) override;
  // A worker failure: restart or stop (Run::ReportFailure).
  grpc::ServerUnaryReactor* ReportFailure(grpc::CallbackServerContext* ctx,
                                          const v1::ReportFailureRequest* req,
                                          v1::ReportFailureResponse* resp) override;
  // A node's workers all exited 0: the exit barrier (Run::ReportFinished).
  grpc::ServerUnaryReactor* ReportFinished(grpc::CallbackServerContext* ctx,
                                           const v1::ReportFinishedRequest* req,
                                           v1::ReportFinishedResponse* resp) override;
  // Which replica group a node joins (ReplicaGroupPlacer::Place); answers at once.
  grpc::ServerUnaryReactor* PlaceReplicaGroup(grpc::CallbackServerContext* ctx,
                                              const v1::PlaceReplicaGroupRequest* req,
                                              v1::PlaceReplicaGroupResponse* resp) override;
  // How each replica group of a job stands (ReplicaGroupPlacer::States); answers at once.
  grpc::ServerUnaryReactor* ReplicaGroupStates(grpc::CallbackServerContext* ctx,
                                               const v1::ReplicaGroupStatesRequest* req,
                                               v1::ReplicaGroupStatesResponse* resp) override;

 private:
  ServiceCore* const core_;
};

}  // namespace meshrun::rendezvous
