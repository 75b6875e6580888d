#include "rendezvous/server/metrics_exposer.h"

#include <arpa/inet.h>

#include <exception>
#include <sstream>

#include <CivetServer.h>
#include <prometheus/collectable.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"
#include "common/endpoint.h"
#include "common/logging.h"
#include "common/security.h"

namespace meshrun::rendezvous {
namespace {

void Reply(mg_connection* conn, int code, const char* reason, const std::string& extra_headers,
           const std::string& content_type, const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n", code,
            reason, content_type.c_str(), body.size(), extra_headers.c_str());
  mg_write(conn, body.data(), body.size());
}

}  // namespace

// GET /metrics: the bearer token when one is set, then the text format.
struct MetricsEndpoint::Handler : public CivetHandler {
  std::string token;
  std::weak_ptr<prometheus::Collectable> metrics;

  bool handleGet(CivetServer*, mg_connection* conn) override {
    if (!token.empty()) {
      const char* auth = mg_get_header(conn, "Authorization");
      if (auth == nullptr || !TokenEquals(auth, absl::StrCat("Bearer ", token))) {
        Reply(conn, 401, "Unauthorized", "WWW-Authenticate: Bearer realm=\"meshrun\"\r\n", "text/plain",
              "this server's metrics need its token: Authorization: Bearer <token>\n");
        return true;
      }
    }
    std::shared_ptr<prometheus::Collectable> m = metrics.lock();
    if (!m) {
      Reply(conn, 503, "Service Unavailable", "", "text/plain", "the server is shutting down\n");
      return true;
    }
    std::ostringstream text;
    prometheus::TextSerializer().Serialize(text, m->Collect());
    Reply(conn, 200, "OK", "", "text/plain; version=0.0.4; charset=utf-8", text.str());
    return true;
  }
};

absl::StatusOr<std::string> MetricsListenAddress(const std::string& host, int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics port ", port, ": must be in 0..65535"));
  }
  if (host.empty() || host == "0.0.0.0" || host == "::") return absl::StrCat("0.0.0.0:", port);
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return HostPort(host, port);
  return absl::InvalidArgumentError(absl::StrCat(
      "metrics host '", host,
      "': must be a numeric IPv4 address or 0.0.0.0 (the metrics HTTP server, Debian's civetweb, has no IPv6)"));
}

MetricsEndpoint::MetricsEndpoint() : handler_(std::make_unique<Handler>()) {}

absl::StatusOr<std::unique_ptr<CivetServer>> MetricsEndpoint::NewHttpServer() const {
  std::vector<std::string> opts = {"listening_ports", addr_, "num_threads", "2", "request_timeout_ms",
                                   std::to_string(absl::ToInt64Milliseconds(options_.request_timeout))};
  std::unique_ptr<CivetServer> http;
  try {
    http = std::make_unique<CivetServer>(opts);
  } catch (const std::exception& e) {
    return absl::AlreadyExistsError(
        absl::StrCat("cannot serve metrics on ", addr_, " (port in use or address not local): ", e.what()));
  }
  http->addHandler("/metrics", handler_.get());
  return http;
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const Options& options, std::shared_ptr<prometheus::Collectable> metrics) {
  absl::StatusOr<std::string> addr = MetricsListenAddress(options.host, options.port);
  if (!addr.ok()) return addr.status();
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->options_ = options;
  e->addr_ = *addr;
  e->metrics_ = metrics;
  e->handler_->token = options.token;
  e->handler_->metrics = metrics;
  absl::StatusOr<std::unique_ptr<CivetServer>> http = e->NewHttpServer();
  if (!http.ok()) return http.status();
  std::vector<int> ports = (*http)->getListeningPorts();
  e->port_ = ports.empty() ? options.port : ports.front();
  // A restart binds the port first given out, not a new one.
  e->addr_ = *MetricsListenAddress(options.host, e->port_);
  absl::MutexLock lock(&e->mu_);
  e->http_ = std::move(*http);
  return e;
}

MetricsEndpoint::~MetricsEndpoint() {
  absl::MutexLock lock(&mu_);
  http_.reset();
}

bool MetricsEndpoint::serving() const {
  absl::MutexLock lock(&mu_);
  return http_ != nullptr;
}

void MetricsEndpoint::OnDescriptorsExhausted() {
  std::unique_ptr<CivetServer> old;
  {
    absl::MutexLock lock(&mu_);
    old = std::move(http_);
  }
  if (old == nullptr) return;
  old.reset();  // Joins civetweb's threads and closes its socket.
  Logger("rdzv")->warn("metrics port {}: stopped while the process is out of file descriptors", port_);
}

absl::Status MetricsEndpoint::OnDescriptorsRecovered() {
  if (serving()) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<CivetServer>> http = NewHttpServer();
  if (!http.ok()) {
    Logger("rdzv")->debug("metrics port {}: not restarted yet: {}", port_, std::string(http.status().message()));
    return http.status();
  }
  {
    absl::MutexLock lock(&mu_);
    http_ = std::move(*http);
  }
  Logger("rdzv")->info("metrics port {}: serving again", port_);
  return absl::OkStatus();
}

}  // namespace meshrun::rendezvous
