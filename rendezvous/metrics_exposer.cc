#include "rendezvous/metrics_exposer.h"

#include <arpa/inet.h>

#include <exception>

#include <prometheus/exposer.h>

#include "absl/strings/str_cat.h"
#include "common/endpoint.h"
#include "common/logging.h"

namespace meshrun::rendezvous {
namespace {

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> NewExposer(const std::string& addr, absl::Duration request_timeout,
                                                                const std::weak_ptr<prometheus::Collectable>& metrics) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", addr, "num_threads", "2", "request_timeout_ms",
        std::to_string(absl::ToInt64Milliseconds(request_timeout))});
  } catch (const std::exception& e) {
    return absl::AlreadyExistsError(
        absl::StrCat("cannot serve metrics on ", addr, " (port in use or address not local): ", e.what()));
  }
  exposer->RegisterCollectable(metrics);
  return exposer;
}

}  // namespace

absl::StatusOr<std::string> MetricsListenAddress(const std::string& host, int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics port ", port, ": must be in 0..65535"));
  }
  if (host.empty() || host == "0.0.0.0" || host == "::") return absl::StrCat("0.0.0.0:", port);
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return HostPort(host, port);
  return absl::InvalidArgumentError(absl::StrCat(
      "metrics host '", host,
      "': must be a numeric IPv4 address or 0.0.0.0 (the metrics HTTP server, prometheus-cpp over Debian's "
      "civetweb, has no IPv6)"));
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const Options& options, std::shared_ptr<prometheus::Collectable> metrics) {
  absl::StatusOr<std::string> addr = MetricsListenAddress(options.host, options.port);
  if (!addr.ok()) return addr.status();
  auto exposer = NewExposer(*addr, options.request_timeout, metrics);
  if (!exposer.ok()) return exposer.status();
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->options_ = options;
  std::vector<int> ports = (*exposer)->GetListeningPorts();
  e->port_ = ports.empty() ? options.port : ports.front();
  // A restart binds the port first given out, not a new one.
  e->addr_ = *MetricsListenAddress(options.host, e->port_);
  e->metrics_ = metrics;
  {
    absl::MutexLock lock(&e->mu_);
    e->exposer_ = std::move(*exposer);
  }
  return e;
}

MetricsEndpoint::~MetricsEndpoint() {
  absl::MutexLock lock(&mu_);
  exposer_.reset();
}

bool MetricsEndpoint::serving() const {
  absl::MutexLock lock(&mu_);
  return exposer_ != nullptr;
}

void MetricsEndpoint::OnDescriptorsExhausted() {
  std::unique_ptr<prometheus::Exposer> old;
  {
    absl::MutexLock lock(&mu_);
    old = std::move(exposer_);
  }
  if (old == nullptr) return;
  old.reset();  // Joins civetweb's threads and closes its socket.
  Logger("rdzv")->warn("metrics port {}: stopped while the process is out of file descriptors", port_);
}

absl::Status MetricsEndpoint::OnDescriptorsRecovered() {
  if (serving()) return absl::OkStatus();
  auto exposer = NewExposer(addr_, options_.request_timeout, metrics_);
  if (!exposer.ok()) {
    Logger("rdzv")->debug("metrics port {}: not restarted yet: {}", port_, std::string(exposer.status().message()));
    return exposer.status();
  }
  {
    absl::MutexLock lock(&mu_);
    exposer_ = std::move(*exposer);
  }
  Logger("rdzv")->info("metrics port {}: serving again", port_);
  return absl::OkStatus();
}

}  // namespace meshrun::rendezvous
