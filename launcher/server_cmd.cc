#include "launcher/server_cmd.h"

#include <signal.h>

#include <cstdio>
#include <fstream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "agent/process.h"
#include "common/endpoint.h"
#include "common/logging.h"
#include "common/net.h"
#include "common/open_files.h"
#include "common/security.h"
#include "launcher/cli.h"
#include "launcher/health_port.h"
#include "launcher/hosting.h"
#include "rendezvous/server.h"

namespace meshrun::launcher {

int ServerMain(int argc, char** argv) {
  CLI::App app{"meshrun server: the rendezvous server as a daemon", "meshrun server"};
  std::string host = "::";
  int port = 29400;
  std::string port_file;
  double grace = 5;
  std::vector<std::string> limits;
  app.add_option("--limit", limits,
                 "NAME=VALUE: a server limit (repeatable); names and defaults in docs/user-guide.md, Server limits")
      ->allow_extra_args(false);
  int metrics_port = -1;
  std::string metrics_host;
  std::string token_file;
  TlsFiles tls_files;
  app.add_option("--host", host, "Address to bind: :: (all), 0.0.0.0 (all IPv4), 127.0.0.1, ...")
      ->default_str("::");
  app.add_option("--port", port, "TCP port; 0 lets the OS pick (printed, and written to --port_file)")
      ->default_str("29400");
  app.add_option("--port_file,--port-file", port_file, "Write the bound port to this file once listening");
  app.add_option("--shutdown_grace,--shutdown-grace", grace, "Seconds open calls get at shutdown")
      ->default_str("5");
  app.add_option("--metrics_port,--metrics-port", metrics_port,
                 "Serve Prometheus metrics at http://<metrics_host>:<port>/metrics (0: any free port; default off)");
  app.add_option("--metrics_host,--metrics-host", metrics_host,
                 "Address for the metrics port (default: --host with a token or TLS, else 127.0.0.1)");
  int health_port = -1;
  std::string health_host;
  app.add_option("--health_port,--health-port", health_port,
                 "Also answer gRPC health checks on this plaintext port (for probes that cannot speak TLS; 0: any free "
                 "port; default off)");
  app.add_option("--health_host,--health-host", health_host, "Address for the health port (default: --host)");
  app.add_option("--token_file,--token-file", token_file,
                 "File holding the token every request must carry (mode 0600; instead of MESHRUN_TOKEN)");
  app.add_option("--tls_cert,--tls-cert", tls_files.cert, "PEM certificate to serve TLS with (MESHRUN_TLS_CERT)");
  app.add_option("--tls_key,--tls-key", tls_files.key, "PEM private key of --tls_cert (MESHRUN_TLS_KEY)");
  app.add_option("--tls_ca,--tls-ca", tls_files.ca,
                 "PEM CA: clients must present a certificate it signed (mutual TLS; MESHRUN_TLS_CA)");
  if (std::optional<int> done = ParseCli(app, argc, argv, "meshrun server")) return *done;
  // One descriptor per agent connection: the server warns at a join whose
  // --nnodes MAX needs more than this (rendezvous/server.h).
  RaiseOpenFilesLimitOrWarn("rdzv");
  if (metrics_port < -1 || metrics_port > 65535) {
    std::fprintf(stderr, "meshrun server: error: --metrics_port=%d: must be in 0..65535\n", metrics_port);
    return 2;
  }
  if (port < 0 || port > 65535) {
    std::fprintf(stderr, "meshrun server: error: --port=%d: must be in 0..65535\n", port);
    return 2;
  }
  if (health_port < -1 || health_port > 65535) {
    std::fprintf(stderr, "meshrun server: error: --health_port=%d: must be in 0..65535\n", health_port);
    return 2;
  }
  if (grace < 0) {
    std::fprintf(stderr, "meshrun server: error: --shutdown_grace=%g: must be >= 0 seconds\n", grace);
    return 2;
  }
  rendezvous::ServerOptions so;
  for (const std::string& l : limits) {
    size_t eq = l.find('=');
    absl::Status s = eq == std::string::npos
                         ? absl::InvalidArgumentError(absl::StrCat("--limit=", l, ": expected NAME=VALUE"))
                         : rendezvous::SetLimit(l.substr(0, eq), l.substr(eq + 1), &so.limits);
    if (!s.ok()) {
      std::fprintf(stderr, "meshrun server: error: --limit: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  so.host = host;
  so.port = port;
  absl::StatusOr<Token> token = ResolveToken(token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "meshrun server: error: %s\n", std::string(token.status().message()).c_str());
    return 2;
  }
  so.token = std::move(token->value);
  absl::StatusOr<TlsMaterial> tls = LoadTls(TlsFilesFromEnv(tls_files));
  absl::Status tls_ok = tls.ok() ? CheckServerTls(*tls) : tls.status();
  if (!tls_ok.ok()) {
    std::fprintf(stderr, "meshrun server: error: %s\n", std::string(tls_ok.message()).c_str());
    return 2;
  }
  so.tls = std::move(*tls);
  if (std::string w = rendezvous::ExposureWarning(so); !w.empty()) {
    std::fprintf(stderr, "meshrun server: warning: %s\n", w.c_str());
  }
  so.metrics_port = metrics_port;
  so.metrics_host = metrics_host;
  auto server = rendezvous::RendezvousServer::Start(so);
  if (!server.ok()) {
    std::fprintf(stderr, "meshrun server: error: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  if (!port_file.empty()) {
    std::string tmp = port_file + ".tmp";
    bool written = false;
    {
      std::ofstream f(tmp);
      f << (*server)->port() << "\n";
      written = static_cast<bool>(f);
    }
    if (!written || std::rename(tmp.c_str(), port_file.c_str()) != 0) {
      std::fprintf(stderr, "meshrun server: error: cannot write --port_file=%s\n", port_file.c_str());
      (*server)->Shutdown(absl::ZeroDuration());
      return 1;
    }
  }
  std::unique_ptr<HealthPort> health;
  if (health_port >= 0) {
    absl::StatusOr<std::unique_ptr<HealthPort>> h = HealthPort::Start(health_host.empty() ? host : health_host, health_port, so.token,
                                                                   so.limits.max_health_watchers);
    if (!h.ok()) {
      std::fprintf(stderr, "meshrun server: error: --health_port: %s\n", std::string(h.status().message()).c_str());
      (*server)->Shutdown(absl::ZeroDuration());
      return 1;
    }
    health = std::move(*h);
    health->SetServing(rendezvous::kHealthServiceName, true);
  }
  // An agent started on this host for this port finds the daemon through
  // the claim and joins it quietly (launcher/hosting.h); best effort.
  absl::StatusOr<HostClaim> claim = HostClaim::Take((*server)->port());
  if (!claim.ok()) Logger("rdzv")->debug("no host claim on port {}: {}", (*server)->port(), std::string(claim.status().message()));
  std::printf("meshrun server listening on %s port %d%s%s\n", host.c_str(), (*server)->port(),
              so.token.empty() ? "" : " (token required)",
              so.tls.mutual() ? " (mutual TLS)" : so.tls.server_tls() ? " (TLS)" : "");
  if (health) {
    std::printf("meshrun server: gRPC health checks, plaintext, on %s\n",
                HostPort(health_host.empty() ? host : health_host, health->port()).c_str());
  }
  if ((*server)->metrics_port() >= 0) {
    std::printf("meshrun server: metrics on %s%s\n", (*server)->metrics_url().c_str(),
                so.token.empty() ? "" : " (bearer token required)");
  }
  std::fflush(stdout);
  // Signals were blocked in main(); wait for one synchronously.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "meshrun server: received %s; shutting down\n", agent::SignalName(sig).c_str());
  if (health) {
    health->SetServing("", false);
    health->SetServing(rendezvous::kHealthServiceName, false);
  }
  (*server)->Shutdown(absl::Seconds(grace));
  return 0;
}

}  // namespace meshrun::launcher
