// A plaintext port that answers only gRPC's standard health service
// (grpc.health.v1.Health), for probes that cannot speak the rendezvous
// port's TLS: Kubernetes' gRPC probes never do TLS, and under mutual TLS a
// probe without a client certificate is refused. It reveals nothing but
// SERVING or NOT_SERVING. `meshrun server --health_port` and `meshrun
// --rdzv_conf health_port=N` (every meshrun: its own liveness, and the
// embedded server's where it runs).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class Server;
}
namespace meshrun::rendezvous {
class HealthService;
namespace state {
class ServingGate;
}
}  // namespace meshrun::rendezvous

namespace meshrun::launcher {

class HealthPort {
 public:
  // Serves on `host`:`port` (0: the OS picks; read it with port()),
  // plaintext. "" (the whole process) is SERVING from the start; other
  // services are unknown until SetServing. Check is open to anyone; Watch
  // needs `token` when it is set, and at most `max_watchers` run at once
  // (rendezvous/grpc/health_service.h). ALREADY_EXISTS naming the address when
  // it cannot bind; INVALID_ARGUMENT for a port outside 0..65535.
  static absl::StatusOr<std::unique_ptr<HealthPort>> Start(const std::string& host, int port,
                                                           const std::string& token, int64_t max_watchers);
  // Stops serving (calls in flight are cancelled).
  ~HealthPort();

  // Sets `service`'s status ("" is the whole process; the rendezvous
  // service is rendezvous::kHealthServiceName). Thread-safe.
  void SetServing(const std::string& service, bool serving);
  // The rendezvous server's services (HealthService::SetServerServing and
  // FollowGate: Rendezvous, Store and Admin; the first two follow `gate`).
  // `gate` must outlive the port. Thread-safe.
  void SetServerServing(bool up);
  void FollowGate(const rendezvous::state::ServingGate* gate);
  int port() const { return port_; }

 private:
  HealthPort() = default;
  std::unique_ptr<rendezvous::HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace meshrun::launcher
