#include "rendezvous/server.h"

#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/net.h"
#include "common/http_text_server.h"
#include "rendezvous/rendezvous_service.h"
#include "rendezvous/rpc_metrics.h"

namespace meshrun::rendezvous {
namespace {

// gRPC's own log lines go to the "grpc" logger. A failed bind is expected
// (another agent on this host hosts the server) and is logged at debug;
// other errors stay visible as warnings.
void RouteGrpcLogs(gpr_log_func_args* args) {
  auto log = Logger("grpc");
  const std::string file = args->file ? args->file : "";
  const bool bind_noise = absl::StrContains(file, "chttp2_server") || absl::StrContains(file, "tcp_server");
  if (args->severity == GPR_LOG_SEVERITY_ERROR && !bind_noise) {
    log->warn("{}:{}: {}", file, args->line, args->message);
  } else {
    log->debug("{}:{}: {}", file, args->line, args->message);
  }
}

}  // namespace

std::string ExposureWarning(const ServerOptions& options) {
  if (!options.token.empty() || options.tls.server_tls() || IsLoopbackName(options.host)) return "";
  return absl::StrCat("the rendezvous server listens on ", options.host,
                      " without a token or TLS: anyone who reaches its port can join runs, report failures, "
                      "and read and write the store; set MESHRUN_TOKEN (or a token file: MESHRUN_TOKEN_FILE, "
                      "token_file) and/or TLS (MESHRUN_TLS_CERT, MESHRUN_TLS_KEY, MESHRUN_TLS_CA)");
}

struct RendezvousServer::Impl {
  ServerOptions options;
  DeadlineTimer timer;
  std::unique_ptr<RunRegistry> registry;
  std::unique_ptr<MemoryReleaser> releaser;
  ServerMetrics metrics;
  std::unique_ptr<RendezvousService> service;
  std::unique_ptr<HttpTextServer> http;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  bool shut_down = false;
};

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RendezvousServer::~RendezvousServer() { Shutdown(absl::Seconds(1)); }

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(const ServerOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", options.port, " is outside 0..65535"));
  }
  static const bool routed = (gpr_set_log_function(&RouteGrpcLogs), true);
  (void)routed;
  // A port that is already listening is refused before gRPC tries to bind:
  // a failed gRPC server start leaves gRPC's state such that the process can
  // abort at exit.
  if (options.port != 0 && PortInUse(options.host, options.port)) {
    return absl::AlreadyExistsError(absl::StrCat("cannot bind the rendezvous server to ", options.host, ":",
                                                 options.port, ": address in use"));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->registry = std::make_unique<RunRegistry>(&impl->timer, options.limits);
  impl->service =
      std::make_unique<RendezvousService>(impl->registry.get(), options.token, &impl->metrics, options.limits);
  impl->releaser = std::make_unique<MemoryReleaser>(&impl->timer, options.limits.memory_release_delay);
  impl->service->set_memory_releaser(impl->releaser.get());

  std::string host = options.host;
  std::string addr = absl::StrContains(host, ':') ? absl::StrCat("[", host, "]:", options.port)
                                                 : absl::StrCat(host, ":", options.port);
  // gRPC's standard health service (grpc.health.v1.Health, Check and Watch)
  // on the same port, outside the token: "" and "meshrun.v1.Rendezvous"
  // answer SERVING while the server runs, NOT_SERVING once it shuts down.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // One server per port: a second agent on this host must fail to bind and
  // become a client (DESIGN.md §1.2).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 1 << 20);
  // Agents ping every few seconds (HTTP/2 keepalive) to notice a lost server.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Connections that make no call (or never finish their handshake) are
  // closed; clients reconnect by themselves (limits.h).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(std::min<int64_t>(INT32_MAX, absl::ToInt64Milliseconds(
                                                                                options.limits.connection_idle_timeout))));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(std::min<int64_t>(INT32_MAX, absl::ToInt64Milliseconds(
                                                                                options.limits.handshake_timeout))));
  // No channelz bookkeeping: a node per connection and counters on every
  // message, for 10,000 agents on one server (bench/rdzv_scale); nothing
  // here serves channelz.
  builder.AddChannelArgument(GRPC_ARG_ENABLE_CHANNELZ, 0);
  // Clients may not index headers in the server's HPACK table: each
  // connection's table otherwise keeps its own copy of every agent's
  // headers (path, user agent, ...); the price is ~100 bytes per request.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_HPACK_TABLE_SIZE_DECODER, 0);
  builder.AddListeningPort(addr, ServerCredentials(options.tls), &impl->port);
  builder.RegisterService(impl->service.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<RpcMetricsInterceptorFactory>(&impl->metrics));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "cannot bind the rendezvous server to ", addr, " (address in use or not local)"));
  }
  impl->service->set_port(impl->port);
  if (options.metrics_port >= 0) {
    Impl* raw = impl.get();
    auto http = HttpTextServer::Start(
        options.metrics_host.empty() ? host : options.metrics_host, options.metrics_port, "/metrics",
        "text/plain; version=0.0.4; charset=utf-8",
        [raw] { return raw->metrics.Render(raw->registry->Status(), raw->service->open_watchers()); });
    if (!http.ok()) {
      impl->server->Shutdown(absl::ToChronoTime(absl::Now()));
      impl->server->Wait();
      return http.status();
    }
    impl->http = std::move(*http);
    Logger("rdzv")->info("metrics on http://{}:{}/metrics", options.metrics_host.empty() ? host : options.metrics_host,
                         impl->http->port());
  }
  if (grpc::HealthCheckServiceInterface* health = impl->server->GetHealthCheckService()) {
    health->SetServingStatus(kHealthServiceName, true);
  }
  Logger("rdzv")->info("rendezvous server listening on {} (port {}{})", addr, impl->port,
                       options.tls.mutual() ? ", mutual TLS" : options.tls.server_tls() ? ", TLS" : ", plain");
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(impl)));
}

void RendezvousServer::Shutdown(absl::Duration grace, const std::string& why) {
  if (!impl_ || impl_->shut_down) return;
  impl_->shut_down = true;
  // Parked calls (joins, store waits, barriers) are answered ABORTED first,
  // so the graceful phase does not wait on them.
  if (grpc::HealthCheckServiceInterface* health = impl_->server->GetHealthCheckService()) {
    health->SetServingStatus(false);  // Probes see NOT_SERVING during the grace period.
  }
  impl_->http.reset();
  impl_->registry->CloseAll(why);
  impl_->server->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  impl_->server->Wait();
}

bool RendezvousServer::WaitForAgents(absl::Duration timeout) {
  return impl_->service->WaitForNoWatchers(timeout);
}

int RendezvousServer::port() const { return impl_->port; }

int RendezvousServer::metrics_port() const { return impl_->http ? impl_->http->port() : -1; }

std::string RendezvousServer::endpoint() const {
  std::string host = impl_->options.host;
  if (host == "0.0.0.0" || host.empty()) host = "127.0.0.1";
  if (host == "::") host = "::1";
  return absl::StrContains(host, ':') ? absl::StrCat("[", host, "]:", impl_->port)
                                      : absl::StrCat(host, ":", impl_->port);
}

}  // namespace meshrun::rendezvous
