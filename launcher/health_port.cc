#include "launcher/health_port.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/endpoint.h"
#include "common/grpc_log.h"
#include "rendezvous/grpc/health_service.h"

namespace meshrun::launcher {

absl::StatusOr<std::unique_ptr<HealthPort>> HealthPort::Start(const std::string& host, int port,
                                                              const std::string& token, int64_t max_watchers) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("health port ", port, ": must be in 0..65535"));
  }
  RouteGrpcLogs();
  std::unique_ptr<HealthPort> h(new HealthPort());
  h->health_ = std::make_unique<rendezvous::HealthService>(token, max_watchers);
  h->health_->SetServing("", true);
  const std::string where = HostPort(host, port);
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(where, grpc::InsecureServerCredentials(), &h->port_);
  builder.RegisterService(h->health_.get());
  h->server_ = builder.BuildAndStart();
  if (!h->server_ || h->port_ == 0) {
    return absl::AlreadyExistsError(absl::StrCat("cannot serve the health port on ", where, " (address in use?)"));
  }
  return h;
}

HealthPort::~HealthPort() {
  if (!server_) return;
  health_->EndWatches("meshrun is exiting");
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
}

void HealthPort::SetServing(const std::string& service, bool serving) { health_->SetServing(service, serving); }

void HealthPort::SetServerServing(bool up) { health_->SetServerServing(up); }

void HealthPort::FollowGate(const rendezvous::state::ServingGate* gate) { health_->FollowGate(gate); }

}  // namespace meshrun::launcher
