#include "launcher/server_cmd.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
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
#include "rendezvous/server/metrics.h"
#include "rendezvous/state/etcd/client/etcd_options.h"
#include "rendezvous/state/etcd/leader_apart.h"
#include "rendezvous/state/etcd/replica.h"
#include "rendezvous/state/serving_gate.h"

namespace meshrun::launcher {

int ServerMain(int argc, char** argv, const ReplicaSeams& seams) {
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
  // Replicas (docs/etcd.md): the state in etcd, one replica leads.
  rendezvous::state::etcd::ConnectionFlags state_flags;
  double state_timeout = 0;
  int64_t state_lease_ttl = 2;
  double state_lease_renew_interval = 0.25;
  double state_load_timeout = 120;
  double state_status_timeout = 0.25;
  std::string advertise;
  std::string state_local_member = "auto";
  int64_t state_max_write_bytes = 1400 << 10;
  int64_t state_max_queued_writes = 100000;
  app.add_option("--state", state_flags.url,
                 "etcd://HOST:PORT[,HOST:PORT...][/PREFIX] (etcds:// for TLS): keep the state in etcd v3 and run as "
                 "one of several replicas sharing it; one leads, the others stand by (docs/etcd.md). Default: in "
                 "memory, a single server");
  app.add_option("--state_tls_ca,--state-tls-ca", state_flags.tls.ca, "PEM CA that signed etcd's certificate (etcds://)");
  app.add_option("--state_tls_cert,--state-tls-cert", state_flags.tls.cert,
                 "PEM client certificate for etcd's --client-cert-auth (etcds://)");
  app.add_option("--state_tls_key,--state-tls-key", state_flags.tls.key, "PEM private key of --state_tls_cert");
  app.add_option("--state_user,--state-user", state_flags.user, "etcd user (etcd's own authentication)");
  app.add_option("--state_password_file,--state-password-file", state_flags.password_file,
                 "File holding --state_user's password (mode 0600)");
  app.add_option("--state_timeout,--state-timeout", state_timeout,
                 "Seconds one etcd call may take, fail-over between members included (default 3)");
  app.add_option("--state_lease_ttl,--state-lease-ttl", state_lease_ttl,
                 "Seconds of the leader's etcd lease: a dead leader is replaced within about this + 0.5 s (etcd "
                 "raises it to its floor: 2 s with its default timing)")
      ->default_str("2");
  app.add_option("--state_lease_renew_interval,--state-lease-renew-interval", state_lease_renew_interval,
                 "Seconds between renewals of that lease, 0.05 up to a third of --state_lease_ttl: the leader rides "
                 "out an etcd outage (etcd electing its leader) of up to TTL - interval - min(TTL/10, 0.25 s)")
      ->default_str("0.25");
  app.add_option("--state_load_timeout,--state-load-timeout", state_load_timeout,
                 "Seconds one read of the state may take when a replica starts to lead (a page of a big store; "
                 "waited for, never sent again while etcd may still work on it)")
      ->default_str("120");
  app.add_option("--state_status_timeout,--state-status-timeout", state_status_timeout,
                 "Seconds a status call waits for etcd's list of the replicas; past it (or while this replica's "
                 "lease is unconfirmed) status answers from memory with the list unknown")
      ->default_str("0.25");
  app.add_option("--state_max_write_bytes,--state-max-write-bytes", state_max_write_bytes,
                 "The largest store write a replica takes, bytes (keys with their etcd prefix and values): a bigger "
                 "one is refused, naming this limit. Keep it under etcd's --max-request-bytes (1.5 MiB by default)")
      ->default_str("1433600");
  app.add_option("--state_max_queued_writes,--state-max-queued-writes", state_max_queued_writes,
                 "Store writes a replica holds queued for etcd (group commit; docs/etcd.md): one more is refused "
                 "RESOURCE_EXHAUSTED, naming this limit")
      ->default_str("100000");
  app.add_option("--state_local_member,--state-local-member", state_local_member,
                 "The etcd member on this replica's host (auto: the first --state member whose host is this "
                 "machine's; none; or HOST:PORT): while this replica leads, etcd's own leader is moved off it, so "
                 "that one host's loss never costs both elections (docs/etcd.md)")
      ->default_str("auto");
  app.add_option("--advertise_addr,--advertise-addr", advertise,
                 "HOST:PORT agents reach this replica on, named by standbys (default: --host when it is one "
                 "address, else this host's name, and the bound port)");
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
  // A replica: etcd is checked now (a bad --state: one line, exit 2).
  rendezvous::state::ServingGate gate;
  // Set once the server runs; the replica's hooks restore into it.
  std::atomic<rendezvous::RendezvousServer*> serving{nullptr};
  std::unique_ptr<rendezvous::state::etcd::Replica> replica;
  if (!state_flags.url.empty()) {
    if (state_timeout < 0 || state_lease_ttl < 1) {
      std::fprintf(stderr, "meshrun server: error: --state_timeout must be >= 0 and --state_lease_ttl >= 1\n");
      return 2;
    }
    if (!(state_lease_renew_interval >= 0.05 && state_lease_renew_interval <= state_lease_ttl / 3.0)) {
      std::fprintf(stderr,
                   "meshrun server: error: --state_lease_renew_interval=%g: must be at least 0.05 and at most a "
                   "third of --state_lease_ttl (%.3f s)\n",
                   state_lease_renew_interval, state_lease_ttl / 3.0);
      return 2;
    }
    if (!(state_load_timeout > 0)) {
      std::fprintf(stderr, "meshrun server: error: --state_load_timeout=%g: must be > 0 seconds\n",
                   state_load_timeout);
      return 2;
    }
    if (!(state_status_timeout > 0)) {
      std::fprintf(stderr, "meshrun server: error: --state_status_timeout=%g: must be > 0 seconds\n",
                   state_status_timeout);
      return 2;
    }
    if (state_max_write_bytes < 1024) {
      std::fprintf(stderr, "meshrun server: error: --state_max_write_bytes=%lld: must be at least 1024 bytes\n",
                   static_cast<long long>(state_max_write_bytes));
      return 2;
    }
    if (state_max_queued_writes < 1) {
      std::fprintf(stderr, "meshrun server: error: --state_max_queued_writes=%lld: must be at least 1\n",
                   static_cast<long long>(state_max_queued_writes));
      return 2;
    }
    state_flags.call_timeout = absl::Seconds(state_timeout);
    absl::StatusOr<rendezvous::state::etcd::Connection> conn = rendezvous::state::etcd::ResolveConnection(state_flags);
    if (!conn.ok()) {
      std::fprintf(stderr, "meshrun server: error: %s\n", std::string(conn.status().message()).c_str());
      return 2;
    }
    if (absl::StatusOr<std::optional<Endpoint>> local =
            rendezvous::state::etcd::LocalMember(state_local_member, conn->client.members);
        !local.ok()) {
      std::fprintf(stderr, "meshrun server: error: %s\n", std::string(local.status().message()).c_str());
      return 2;
    }
    rendezvous::state::etcd::ReplicaOptions ro;
    ro.local_member = state_local_member;
    ro.connection = std::move(*conn);
    // The replica's etcd calls, from its first, in the server's metrics.
    so.metrics = std::make_shared<rendezvous::ServerMetrics>();
    ro.connection.client.on_call = [m = so.metrics](const std::string& op, absl::StatusCode code, absl::Duration took) {
      m->RecordStateCall(op, absl::StatusCodeToString(code), absl::ToDoubleSeconds(took));
    };
    ro.id = absl::StrCat(Hostname(), ":", getpid());
    ro.lease_ttl_s = state_lease_ttl;
    ro.lease_renew_interval = absl::Seconds(state_lease_renew_interval);
    ro.journal.load_timeout = absl::Seconds(state_load_timeout);
    ro.status_read_timeout = absl::Seconds(state_status_timeout);
    ro.journal.max_write_bytes = state_max_write_bytes;
    ro.journal.writer.max_queued_writes = state_max_queued_writes;
    const std::string members = ro.connection.url.MembersString();
    rendezvous::state::etcd::ReplicaHooks hooks;
    hooks.on_lead = [&serving, &gate](const std::vector<rendezvous::state::RunRecord>& records,
                                      const rendezvous::state::etcd::Takeover& t) {
      auto* s = serving.load();
      if (s == nullptr) return;
      const std::string loaded = absl::StrCat(absl::ToInt64Milliseconds(t.load_time), " ms");
      rendezvous::TimelineEvent note;
      note.kind = t.reload ? "reload" : "failover";
      note.detail = t.reload ? absl::StrCat("replica ", gate.self(), " loaded its state from etcd again in ", loaded,
                                            ": ", t.why)
                             : absl::StrCat("replica ", gate.self(), " leads",
                                            t.previous_leader.empty() ? "" : absl::StrCat(" after ", t.previous_leader),
                                            "; state loaded in ", loaded, " after its election (a dead leader's ",
                                            t.lease_ttl_s, " s lease runs out first)");
      // torchft's quorum ids go on above every id an earlier term gave
      // (lighthouse_registry.h).
      s->RaiseQuorumIdFloor(t.election_revision << 24);
      s->RestoreState(records, "the rendezvous server replicas' leader changed", note);
    };
    hooks.on_stand_by = [&serving](const std::string& why) {
      if (auto* s = serving.load()) s->ClearState(why);
    };
    absl::StatusOr<std::unique_ptr<rendezvous::state::etcd::Replica>> r =
        rendezvous::state::etcd::Replica::Start(std::move(ro), &gate, std::move(hooks));
    if (!r.ok()) {
      std::fprintf(stderr, "meshrun server: error: --state=%s: %s\n", state_flags.url.c_str(),
                   std::string(r.status().message()).c_str());
      return 2;
    }
    replica = std::move(*r);
    so.journal = seams.journal ? seams.journal(replica->journal()) : replica->journal();
    so.gate = seams.gate ? seams.gate(&gate) : &gate;
    // A save that failed: stop serving at once, and serve again only from
    // what a fresh load finds in etcd.
    so.on_durability_lost = [r = replica.get()](const absl::Status& why) { r->Reload(std::string(why.message())); };
    Logger("rdzv")->info("state in etcd at {}", members);
  }
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
    if (so.gate != nullptr) health->FollowGate(so.gate);
    health->SetServerServing(true);
  }
  // An agent started on this host for this port finds the daemon through
  // the claim and joins it quietly (launcher/hosting.h); best effort.
  absl::StatusOr<HostClaim> claim = HostClaim::Take((*server)->port(), host);
  if (!claim.ok()) Logger("rdzv")->debug("no host claim on port {}: {}", (*server)->port(), std::string(claim.status().message()));
  if (replica) {
    serving = server->get();
    if (advertise.empty()) {
      const bool any = host.empty() || host == "::" || host == "0.0.0.0";
      advertise = HostPort(any ? Hostname() : host, (*server)->port());
    }
    if (absl::Status s = replica->Campaign(advertise); !s.ok()) {
      std::fprintf(stderr, "meshrun server: error: --state=%s: cannot enter the election: %s\n",
                   state_flags.url.c_str(), std::string(s.message()).c_str());
      (*server)->Shutdown(absl::ZeroDuration());
      return 2;
    }
    std::printf("meshrun server: replica %s, state in etcd (%s); standing by until it leads\n", advertise.c_str(),
                state_flags.url.c_str());
  }
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
    health->SetServerServing(false);
  }
  // A leader resigns first: the next replica leads at once.
  replica.reset();
  (*server)->Shutdown(absl::Seconds(grace));
  return 0;
}

}  // namespace meshrun::launcher
