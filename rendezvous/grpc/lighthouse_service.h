// The Lighthouse gRPC service: torchft's quorum service per run
// (rendezvous/lighthouse/), for the node agents, which forward their
// workers' torchft LighthouseService calls with the run and token
// (agent/lighthouse/). A Quorum call waits, without a thread, until a
// quorum includes its group or its deadline passes (DEADLINE_EXCEEDED, as
// torchft's client sees from its own lighthouse). Thread-safe.
#pragma once

#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "rendezvous/grpc/service_core.h"
#include "rendezvous/lighthouse/lighthouse_registry.h"

namespace meshrun::rendezvous {

class LighthouseService final : public ::meshrun::v1::Lighthouse::CallbackService {
 public:
  // `core` and `lighthouses` must outlive the service.
  LighthouseService(ServiceCore* core, lighthouse::LighthouseRegistry* lighthouses)
      : core_(core), lighthouses_(lighthouses) {}

  // After Admit (INVALID_ARGUMENT, UNAUTHENTICATED, a standby's
  // UNAVAILABLE): INVALID_ARGUMENT for bad settings or an empty replica id,
  // RESOURCE_EXHAUSTED past the lighthouse's bounds or max_runs (a run id
  // the server does not have becomes a store-only run, as a store call's
  // does: several jobs may share one lighthouse); else the quorum that
  // includes the requester.
  grpc::ServerUnaryReactor* Quorum(grpc::CallbackServerContext* ctx, const v1::LighthouseQuorumRequest* req,
                                   v1::LighthouseQuorumResponse* resp) override;
  // The same checks; answers at once.
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const v1::LighthouseHeartbeatRequest* req,
                                      v1::LighthouseHeartbeatResponse* resp) override;

 private:
  ServiceCore* const core_;
  lighthouse::LighthouseRegistry* const lighthouses_;
};

}  // namespace meshrun::rendezvous
