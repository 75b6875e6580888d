// The Admin gRPC service (Status): the server's and its runs' state for
// operators (`meshrun status`): runs and their nodes, per-method request
// counters, traffic, the version, and a replicated server's replicas and
// which one leads. A standby answers it too. Thread-safe; holds no state of
// its own (service_core.h has the counters).
#pragma once

#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "rendezvous/grpc/service_core.h"

namespace meshrun::rendezvous {

class AdminService final : public ::meshrun::v1::Admin::CallbackService {
 public:
  // `core` must outlive the service.
  explicit AdminService(ServiceCore* core) : core_(core) {}

  // Every run's status (or the one the request names: O(that run's
  // nodes)), with the counters; answered by a standby as by the leader.
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const v1::StatusRequest* req,
                                   v1::StatusResponse* resp) override;

 private:
  ServiceCore* const core_;
};

}  // namespace meshrun::rendezvous
