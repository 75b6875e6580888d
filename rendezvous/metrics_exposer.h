// Serves the server's metrics (metrics.h) at GET /metrics in Prometheus' text
// format, with prometheus-cpp's Exposer (its HTTP server is Debian's
// civetweb). Other paths answer 404.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace prometheus {
class Collectable;
class Exposer;
}  // namespace prometheus

namespace meshrun::rendezvous {

// The civetweb listening address for `host` and `port`: "0.0.0.0:<port>" for
// "", "0.0.0.0" and "::" (all addresses: Debian's civetweb is built without
// IPv6, so "all" means all IPv4 addresses), "<host>:<port>" for a numeric IPv4
// address. INVALID_ARGUMENT naming the value for an IPv6 address or a name
// (only numeric IPv4 is allowed). Pure.
absl::StatusOr<std::string> MetricsListenAddress(const std::string& host, int port);

// Starts serving `metrics` on `host`:`port` (0: the OS picks a port; read it
// with MetricsPort). Two HTTP threads; a request must arrive within
// `request_timeout`. INVALID_ARGUMENT as MetricsListenAddress;
// ALREADY_EXISTS naming host:port when it cannot listen (port in use).
// `metrics` is held weakly: it must outlive the returned exposer to be scraped.
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& host, int port, const std::shared_ptr<prometheus::Collectable>& metrics,
    absl::Duration request_timeout = absl::Seconds(10));

// The port an exposer listens on (-1 when none).
int MetricsPort(const prometheus::Exposer& exposer);

}  // namespace meshrun::rendezvous
