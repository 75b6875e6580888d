#include "launcher/launch.h"

#include "launcher/cli.h"
#include "launcher/health_port.h"
#include "launcher/hosting.h"

#include <algorithm>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "agent/process.h"
#include "agent/tcpstore/client.h"
#include "agent/tcpstore/tcpstore_server.h"
#include "common/env_registry.h"
#include "common/logging.h"
#include "common/net.h"
#include "common/open_files.h"
#include "common/security.h"
#include "rendezvous/server.h"

namespace meshrun::launcher {
namespace {

// Where a hosted server listens: --standalone binds loopback only; a
// multi-node host binds the endpoint's address when it is a loopback name
// (every node is on this host), else every address (a name may resolve to
// 127.0.1.1 here while other hosts reach this one by its real address).
std::string HostingAddress(const LaunchConfig& config) {
  if (config.standalone) return "127.0.0.1";
  if (IsLoopbackName(config.endpoint_host)) {
    absl::StatusOr<std::vector<std::string>> addrs = ResolveNumeric(config.endpoint_host);
    return addrs.ok() ? addrs->front() : "127.0.0.1";
  }
  return "::";
}

// Node rank 0's agent store on --master_port (the static backend), as
// torchrun's agent store is. UNAVAILABLE naming the port when it is taken.
absl::StatusOr<std::shared_ptr<agent::tcpstore::AgentStore>> StartStaticAgentStore(const LaunchConfig& config,
                                                                                    const std::string& bind_host) {
  agent::tcpstore::AgentStoreOptions o;
  o.bind_addr = bind_host == "::" ? "" : bind_host;
  o.port = config.static_master_port;
  o.max_connections = config.agent.agent_store_max_connections;
  o.max_buffered_bytes = config.agent.agent_store_max_buffered_bytes;
  o.max_waits = config.agent.agent_store_max_waits;
  o.max_listed_keys = config.agent.agent_store_max_listed_keys;
  o.read_cache_bytes = config.agent.agent_store_read_cache_bytes;
  o.log = [](const std::string& line) { Logger("agent")->warn("{}", line); };
  absl::StatusOr<std::unique_ptr<agent::tcpstore::AgentStore>> s = agent::tcpstore::AgentStore::Start(std::move(o));
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("node rank 0 serves the workers' store on --master_port=",
                                               config.static_master_port, ", but ", s.status().message()));
  }
  return std::shared_ptr<agent::tcpstore::AgentStore>(std::move(*s));
}

// The static backend on a node that does not host: the rendezvous server's
// endpoint, read from node rank 0's agent store at --master_addr:--master_port.
absl::StatusOr<std::string> FindStaticServer(const LaunchConfig& config, absl::Duration timeout) {
  absl::StatusOr<std::string> port = agent::tcpstore::GetKey(
      config.endpoint_host, config.static_master_port, agent::tcpstore::kRendezvousPortKey, timeout);
  int p = 0;
  if (port.ok() && (!absl::SimpleAtoi(*port, &p) || p <= 0 || p > 65535)) {
    port = absl::UnavailableError(absl::StrCat("it answered '", port->substr(0, 32), "', not a port"));
  }
  if (!port.ok()) {
    return absl::Status(port.status().code(),
                        absl::StrCat("static backend: cannot find the rendezvous server through node rank 0's "
                                     "agent store at ", Endpoint{config.endpoint_host, config.static_master_port}.ToString(),
                                     ": ", port.status().message()));
  }
  return Endpoint{config.endpoint_host, p}.ToString();
}

}  // namespace

int Launch(LaunchConfig config) {
  agent::AgentOptions& a = config.agent;
  for (const auto& note : config.notes) std::fprintf(stderr, "meshrun: note: %s\n", note.c_str());

  // Before anything opens a descriptor: a hosted server holds one per agent.
  const std::optional<OpenFilesLimit> open_files = RaiseOpenFilesLimitOrWarn("launcher");
  // Probes see this meshrun ("") from the start, and the server it hosts.
  std::unique_ptr<HealthPort> health;
  if (config.health_port >= 0) {
    absl::StatusOr<std::unique_ptr<HealthPort>> h = HealthPort::Start("::", config.health_port, a.auth.token,
                                                                   config.server_limits.max_health_watchers);
    if (!h.ok()) {
      std::fprintf(stderr, "meshrun: error: rdzv_conf health_port: %s\n", std::string(h.status().message()).c_str());
      return 1;
    }
    health = std::move(*h);
    Logger("launcher")->info("gRPC health checks on plaintext port {}", health->port());
  }
  std::unique_ptr<rendezvous::RendezvousServer> server;
  std::optional<HostClaim> host_claim;  // Held while `server` serves.
  const bool local = config.standalone || IsLocalHost(config.endpoint_host);
  bool try_host = config.is_host.value_or(local);
  a.is_endpoint_host = local;
  const std::string bind_host = HostingAddress(config);
  if (!a.agent_store_enabled) config.static_master_port = 0;  // The server takes --master_port, as before.
  // The static backend: node rank 0's agent store takes --master_port first.
  std::shared_ptr<agent::tcpstore::AgentStore> static_store;
  if (try_host && config.static_master_port > 0) {
    absl::StatusOr<std::shared_ptr<agent::tcpstore::AgentStore>> st = StartStaticAgentStore(config, bind_host);
    if (st.ok()) {
      static_store = *st;
    } else if (config.is_host.value_or(false)) {
      std::fprintf(stderr, "meshrun: error: is_host=1 but %s\n", std::string(st.status().message()).c_str());
      return 1;
    } else {
      Logger("launcher")->warn("{}; joining as a client", std::string(st.status().message()));
      try_host = false;
    }
  }
  if (try_host) {
    rendezvous::ServerOptions so;
    so.host = bind_host;
    so.port = static_store ? config.static_server_port : config.endpoint_port;
    so.token = a.auth.token;
    so.limits = config.server_limits;
    so.metrics_port = config.metrics_port;
    so.tls = a.auth.tls;
    so.open_files_warning = false;  // Said below, once, with this node's workers counted.
    // One meshrun per network namespace tries the port (docs/design.md 4b).
    std::optional<HostClaim> claim;
    absl::Status started_status;
    if (!config.standalone && !static_store) {
      absl::StatusOr<HostClaim> c = HostClaim::Take(config.endpoint_port, so.host);
      if (c.ok()) {
        claim = std::move(*c);
      } else if (absl::IsAlreadyExists(c.status())) {
        started_status = c.status();
      }  // Any other error: no claim is possible here; the bind decides.
    }
    absl::StatusOr<std::unique_ptr<rendezvous::RendezvousServer>> started =
        started_status.ok() ? rendezvous::RendezvousServer::Start(so)
                            : absl::StatusOr<std::unique_ptr<rendezvous::RendezvousServer>>(started_status);
    if (absl::Status tls_ok = CheckServerTls(so.tls); started.ok() && !tls_ok.ok()) {
      (*started)->Shutdown(absl::ZeroDuration());
      std::fprintf(stderr, "meshrun: error: this meshrun hosts the rendezvous server on port %d, but %s; or set "
                   "is_host=0 and run the server elsewhere\n", config.endpoint_port, std::string(tls_ok.message()).c_str());
      return 1;
    }
    if (started.ok()) {
      if (std::string w = rendezvous::ExposureWarning(so); !w.empty()) {
        std::fprintf(stderr, "meshrun: warning: %s\n", w.c_str());
      }
      server = std::move(*started);
      host_claim = std::move(claim);
      if (health) health->SetServerServing(true);
      a.endpoint = config.standalone ? server->endpoint()
                                     : Endpoint{config.endpoint_host, server->port()}.ToString();
      if (static_store) {
        static_store->SetLocalKey(agent::tcpstore::kRendezvousPortKey, absl::StrCat(server->port()));
        a.agent_store = static_store;
      }
      Logger("launcher")->info("hosting the rendezvous server on port {}", server->port());
      if (server->metrics_port() >= 0) std::fprintf(stderr, "meshrun: metrics on %s\n", server->metrics_url().c_str());
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
  if (a.endpoint.empty() && config.static_master_port > 0) {
    absl::StatusOr<std::string> ep = FindStaticServer(config, a.join_timeout);
    if (!ep.ok()) {
      std::fprintf(stderr, "meshrun: error: %s\n", std::string(ep.status().message()).c_str());
      return 1;
    }
    a.endpoint = *ep;
  }
  if (a.endpoint.empty()) {
    a.endpoint = config.endpoint_list.empty() ? Endpoint{config.endpoint_host, config.endpoint_port}.ToString()
                                              : config.endpoint_list;
  }
  if (open_files) {
    const int job_nodes = a.max_nodes * std::max(1, a.replica_groups);  // (max_nodes is per replica group.)
    const std::string need_for =
        server ? absl::StrCat("the rendezvous server for --nnodes MAX=", job_nodes, " with this node's ", a.nproc,
                              " worker(s)")
               : absl::StrCat("this node's ", a.nproc, " worker(s)");
    const std::string w =
        OpenFilesWarning(*open_files, DescriptorsNeeded(server ? job_nodes : 0, a.nproc), need_for);
    if (!w.empty()) std::fprintf(stderr, "meshrun: warning: %s\n", w.c_str());
  }
  if (config.standalone && a.nproc > 1 && !env::Get(env::kOmpNumThreads)) {
    Logger("launcher")->info("setting OMP_NUM_THREADS=1 for each worker (unset in the environment)");
  }

  if (server) {
    a.on_stop_signal = [&server, &health](int signo) {
      if (health) health->SetServerServing(false);
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
    if (health) health->SetServerServing(false);
    server->Shutdown(absl::Seconds(1));
  }
  return code;
}

}  // namespace meshrun::launcher
