#include "rendezvous/metrics_exposer.h"

#include <arpa/inet.h>

#include <exception>

#include <prometheus/exposer.h>

#include "absl/strings/str_cat.h"

namespace meshrun::rendezvous {

absl::StatusOr<std::string> MetricsListenAddress(const std::string& host, int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics port ", port, ": must be in 0..65535"));
  }
  if (host.empty() || host == "0.0.0.0" || host == "::") return absl::StrCat("0.0.0.0:", port);
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return absl::StrCat(host, ":", port);
  return absl::InvalidArgumentError(absl::StrCat(
      "metrics host '", host,
      "': must be a numeric IPv4 address or 0.0.0.0 (the metrics HTTP server, prometheus-cpp over Debian's "
      "civetweb, has no IPv6)"));
}

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& host, int port, const std::shared_ptr<prometheus::Collectable>& metrics,
    absl::Duration request_timeout) {
  absl::StatusOr<std::string> addr = MetricsListenAddress(host, port);
  if (!addr.ok()) return addr.status();
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", *addr, "num_threads", "2", "request_timeout_ms",
        std::to_string(absl::ToInt64Milliseconds(request_timeout))});
  } catch (const std::exception& e) {
    return absl::AlreadyExistsError(
        absl::StrCat("cannot serve metrics on ", *addr, " (port in use or address not local): ", e.what()));
  }
  exposer->RegisterCollectable(metrics);
  return exposer;
}

int MetricsPort(const prometheus::Exposer& exposer) {
  std::vector<int> ports = exposer.GetListeningPorts();
  return ports.empty() ? -1 : ports.front();
}

}  // namespace meshrun::rendezvous
