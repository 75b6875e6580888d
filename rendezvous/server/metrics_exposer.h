// Serves the server's metrics (metrics.h) at GET /metrics in Prometheus' text
// format (prometheus-cpp's TextSerializer), over Debian's civetweb. A server
// with a token requires it as an HTTP bearer token ("Authorization: Bearer
// <token>": Prometheus' authorization / bearer_token settings): the metrics
// name every run, so they are shown only to callers allowed to see runs.
// Plain HTTP only: Debian 12's civetweb loads OpenSSL by name at run time
// and crashes serving TLS with OpenSSL 3 (checked: a bare CivetServer with
// ssl_certificate segfaults at the first handshake), so the server keeps a
// TLS server's metrics without a token on loopback (server.h). Other paths
// answer 404.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rendezvous/server/listener_watch.h"

class CivetServer;
namespace prometheus {
class Collectable;
}  // namespace prometheus

namespace meshrun::rendezvous {

// The civetweb listening address for `host` and `port`: "0.0.0.0:<port>" for
// "", "0.0.0.0" and "::" (all addresses: Debian's civetweb is built without
// IPv6, so "all" means all IPv4 addresses), "<host>:<port>" for a numeric IPv4
// address. INVALID_ARGUMENT naming the value for an IPv6 address or a name
// (only numeric IPv4 is allowed). Pure.
absl::StatusOr<std::string> MetricsListenAddress(const std::string& host, int port);

// The metrics port. When the process runs out of file descriptors,
// civetweb's listening thread polls and fails to accept in a busy loop (one
// core at 100% for as long as a connection waits); so, told by the server's
// ListenerWatch (the one detector: fewer than
// DescriptorShortage::kLowDescriptors free), it stops the HTTP server
// (scrapes are refused meanwhile) and starts it again on the same port once
// the watch sees DescriptorShortage::kHeadroom free.
class MetricsEndpoint : public DescriptorObserver {
 public:
  struct Options {
    std::string host;  // See MetricsListenAddress.
    int port = 0;      // 0: the OS picks one (read it with port()).
    // A request must arrive within this time (civetweb's request_timeout_ms).
    absl::Duration request_timeout = absl::Seconds(10);
    // Non-empty: every scrape must carry "Authorization: Bearer <token>",
    // else 401 (compared in constant time).
    std::string token;
  };

  // Starts serving `metrics` (held weakly: it must outlive the endpoint to
  // be scraped) with two HTTP threads. INVALID_ARGUMENT as
  // MetricsListenAddress; ALREADY_EXISTS naming host:port when it cannot
  // listen (port in use).
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const Options& options,
                                                                std::shared_ptr<prometheus::Collectable> metrics);
  // Stops the HTTP server.
  ~MetricsEndpoint() override;
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // The port it listens on (the same after a restart).
  int port() const { return port_; }
  // False while stopped for want of descriptors. Thread-safe.
  bool serving() const;

  // Stops the HTTP server (joins civetweb's threads, closes its socket) and
  // warns once. Nothing when already stopped. Thread-safe.
  void OnDescriptorsExhausted() override;
  // Starts the HTTP server again on port(); OK when serving already.
  // ALREADY_EXISTS when it cannot listen yet (logged at debug; the watch
  // asks again at its next check). Thread-safe.
  absl::Status OnDescriptorsRecovered() override;

 private:
  MetricsEndpoint();
  // A civetweb server listening on addr_ with handler_ at /metrics.
  absl::StatusOr<std::unique_ptr<CivetServer>> NewHttpServer() const;

  Options options_;
  std::string addr_;  // host:port as bound.
  int port_ = 0;
  std::weak_ptr<prometheus::Collectable> metrics_;
  mutable absl::Mutex mu_;
  struct Handler;
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<CivetServer> http_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshrun::rendezvous
