#include "launcher/launch.h"

#include "launcher/cli.h"
#include "launcher/hosting.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "agent/process.h"
#include "common/env_registry.h"
#include "common/logging.h"
#include "common/net.h"
#include "common/open_files.h"
#include "common/security.h"
#include "rendezvous/server.h"

namespace meshrun::launcher {
namespace {

// Raises the soft open-files limit to the hard one (common/open_files.h)
// and logs the figures at debug; a failure is a warning, not fatal.
std::optional<OpenFilesLimit> RaiseOpenFiles(const char* logger) {
  absl::StatusOr<OpenFilesLimit> limit = RaiseOpenFilesLimit();
  if (!limit.ok()) {
    Logger(logger)->warn("cannot raise the open files limit: {}", std::string(limit.status().message()));
    return std::nullopt;
  }
  Logger(logger)->debug("open files limit: soft {} (was {}), hard {}", limit->soft, limit->soft_at_start,
                        limit->hard);
  return *limit;
}

}  // namespace

int Launch(LaunchConfig config) {
  agent::AgentOptions& a = config.agent;
  for (const auto& note : config.notes) std::fprintf(stderr, "meshrun: note: %s\n", note.c_str());

  // Before anything opens a descriptor: a hosted server holds one per agent.
  const std::optional<OpenFilesLimit> open_files = RaiseOpenFiles("launcher");
  std::unique_ptr<rendezvous::RendezvousServer> server;
  std::optional<HostClaim> host_claim;  // Held while `server` serves.
  const bool local = config.standalone || IsLocalHost(config.endpoint_host);
  const bool try_host = config.is_host.value_or(local);
  a.is_endpoint_host = local;
  if (try_host) {
    rendezvous::ServerOptions so;
    // --standalone binds loopback only; a multi-node host binds the
    // endpoint's address when it is numeric, else every address.
    if (config.standalone) {
      so.host = "127.0.0.1";
    } else if (IsLoopbackName(config.endpoint_host)) {
      // Every node is on this host: stay on loopback.
      absl::StatusOr<std::vector<std::string>> addrs = ResolveNumeric(config.endpoint_host);
      so.host = addrs.ok() ? addrs->front() : "127.0.0.1";
    } else {
      // A name may resolve to 127.0.1.1 here while other hosts reach this
      // one by its real address: listen on every address.
      so.host = "::";
    }
    so.port = config.endpoint_port;
    so.token = a.token;
    so.limits = config.server_limits;
    so.metrics_port = config.metrics_port;
    so.tls = a.tls;
    so.open_files_warning = false;  // Said below, once, with this node's workers counted.
    // One meshrun per network namespace tries the port (docs/design.md 4b).
    std::optional<HostClaim> claim;
    absl::Status started_status;
    if (!config.standalone) {
      absl::StatusOr<HostClaim> c = HostClaim::Take(config.endpoint_port);
      if (c.ok()) {
        claim = std::move(*c);
      } else if (absl::IsAlreadyExists(c.status())) {
        started_status = c.status();
      }  // Any other error: no claim is possible here; the bind decides.
    }
    absl::StatusOr<std::unique_ptr<rendezvous::RendezvousServer>> started =
        started_status.ok() ? rendezvous::RendezvousServer::Start(so)
                            : absl::StatusOr<std::unique_ptr<rendezvous::RendezvousServer>>(started_status);
    if (started.ok() && a.tls.client_tls() && !a.tls.server_tls()) {
      (*started)->Shutdown(absl::ZeroDuration());
      std::fprintf(stderr,
                   "meshrun: error: this meshrun hosts the rendezvous server on port %d but has only MESHRUN_TLS_CA "
                   "(tls_ca): a TLS server also needs MESHRUN_TLS_CERT and MESHRUN_TLS_KEY (tls_cert, tls_key); or "
                   "set is_host=0 and run the server elsewhere\n",
                   config.endpoint_port);
      return 1;
    }
    if (started.ok()) {
      if (std::string w = rendezvous::ExposureWarning(so); !w.empty()) {
        std::fprintf(stderr, "meshrun: warning: %s\n", w.c_str());
      }
      server = std::move(*started);
      host_claim = std::move(claim);
      a.endpoint = config.standalone ? server->endpoint()
                                     : Endpoint{config.endpoint_host, server->port()}.ToString();
      Logger("launcher")->info("hosting the rendezvous server on port {}", server->port());
      if (server->metrics_port() >= 0) {
        std::fprintf(stderr, "meshrun: metrics on http://%s:%d/metrics\n", so.host.c_str(), server->metrics_port());
      }
    } else if (config.is_host.value_or(false)) {
      std::fprintf(stderr, "meshrun: error: is_host=1 but %s\n", std::string(started.status().message()).c_str());
      return 1;
    } else if (!started_status.ok()) {
      // Another meshrun of this namespace serves the port: the usual case of
      // several agents on the endpoint's host.
      Logger("launcher")->info("{}; joining it as a client", std::string(started.status().message()));
      a.endpoint_note = std::string(started.status().message());
    } else {
      a.endpoint_note = absl::StrCat("this meshrun could not host the server on port ", config.endpoint_port, ": ",
                                     started.status().message(),
                                     " (another program holds the port?)");
      Logger("launcher")->warn("{}; joining {}:{} as a client", a.endpoint_note, config.endpoint_host,
                               config.endpoint_port);
    }
  }
  if (a.endpoint.empty()) a.endpoint = Endpoint{config.endpoint_host, config.endpoint_port}.ToString();
  if (open_files) {
    const std::string need_for =
        server ? absl::StrCat("the rendezvous server for --nnodes MAX=", a.max_nodes, " with this node's ", a.nproc,
                              " worker(s)")
               : absl::StrCat("this node's ", a.nproc, " worker(s)");
    const std::string w =
        OpenFilesWarning(*open_files, DescriptorsNeeded(server ? a.max_nodes : 0, a.nproc), need_for);
    if (!w.empty()) std::fprintf(stderr, "meshrun: warning: %s\n", w.c_str());
  }
  if (config.standalone && a.nproc > 1 && !env::Get(env::kOmpNumThreads)) {
    Logger("launcher")->info("setting OMP_NUM_THREADS=1 for each worker (unset in the environment)");
  }

  if (server) {
    a.on_stop_signal = [&server](int signo) {
      server->Shutdown(absl::Seconds(1), absl::StrCat("the rendezvous server is shutting down: its meshrun on ",
                                                       Hostname(), " received ", agent::SignalName(signo)));
    };
  }
  agent::NodeAgent node_agent(a);
  int code = node_agent.Run();
  if (server) {
    // The other nodes may still be stopping their workers or reading the
    // run's last event: keep serving until they are gone (bounded).
    // A meshrun told to stop (a signal) stops serving at once: the others
    // notice the lost server and stop too.
    if (node_agent.received_signal() == 0 && !server->WaitForAgents(a.exit_barrier_timeout)) {
      Logger("launcher")->warn("other agents still connected after {}; shutting the server down",
                               absl::FormatDuration(a.exit_barrier_timeout));
    }
    server->Shutdown(absl::Seconds(1));
  }
  return code;
}

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
  app.add_option("--metrics_host,--metrics-host", metrics_host, "Address for the metrics port (default: --host)");
  app.add_option("--token_file,--token-file", token_file,
                 "File holding the token every request must carry (mode 0600; instead of MESHRUN_TOKEN)");
  app.add_option("--tls_cert,--tls-cert", tls_files.cert, "PEM certificate to serve TLS with (MESHRUN_TLS_CERT)");
  app.add_option("--tls_key,--tls-key", tls_files.key, "PEM private key of --tls_cert (MESHRUN_TLS_KEY)");
  app.add_option("--tls_ca,--tls-ca", tls_files.ca,
                 "PEM CA: clients must present a certificate it signed (mutual TLS; MESHRUN_TLS_CA)");
  if (std::optional<int> done = ParseCli(app, argc, argv, "meshrun server")) return *done;
  // One descriptor per agent connection: the server warns at a join whose
  // --nnodes MAX needs more than this (rendezvous/server.h).
  RaiseOpenFiles("rdzv");
  if (metrics_port < -1 || metrics_port > 65535) {
    std::fprintf(stderr, "meshrun server: error: --metrics_port=%d: must be in 0..65535\n", metrics_port);
    return 2;
  }
  if (port < 0 || port > 65535) {
    std::fprintf(stderr, "meshrun server: error: --port=%d: must be in 0..65535\n", port);
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
  if (!tls.ok()) {
    std::fprintf(stderr, "meshrun server: error: %s\n", std::string(tls.status().message()).c_str());
    return 2;
  }
  if (tls->client_tls() && !tls->server_tls()) {
    std::fprintf(stderr, "meshrun server: error: --tls_ca (MESHRUN_TLS_CA) is set without --tls_cert and --tls_key: "
                         "a TLS server needs its own certificate and key\n");
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
  std::printf("meshrun server listening on %s port %d%s%s\n", host.c_str(), (*server)->port(),
              so.token.empty() ? "" : " (token required)",
              so.tls.mutual() ? " (mutual TLS)" : so.tls.server_tls() ? " (TLS)" : "");
  if ((*server)->metrics_port() >= 0) {
    std::printf("meshrun server: metrics on http://%s:%d/metrics\n", (metrics_host.empty() ? host : metrics_host).c_str(),
                (*server)->metrics_port());
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
  (*server)->Shutdown(absl::Seconds(grace));
  return 0;
}

}  // namespace meshrun::launcher
