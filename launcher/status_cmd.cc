#include "launcher/status_cmd.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/endpoint.h"
#include "common/security.h"
#include "launcher/cli.h"
#include "nlohmann/json.hpp"

namespace meshrun::launcher {
namespace {

std::string Age(absl::Duration d) {
  if (d < absl::ZeroDuration()) return "-";
  return absl::StrFormat("%.1fs ago", absl::ToDoubleSeconds(d));
}

std::string Nnodes(const rendezvous::RunStatus& r) {
  return r.min_nodes == r.max_nodes ? absl::StrCat(r.max_nodes) : absl::StrCat(r.min_nodes, ":", r.max_nodes);
}

int Usage(const std::string& msg) {
  std::fprintf(stderr, "meshrun status: error: %s\n", msg.c_str());
  return 2;
}

}  // namespace

std::string FormatStatusTable(const client::ServerStatus& status, const std::string& endpoint) {
  std::string out;
  if (!status.replicas.empty() || !status.replica_role.empty()) {
    std::vector<std::string> names;
    for (const auto& r : status.replicas) names.push_back(absl::StrCat(r.address, r.leader ? " (leader)" : ""));
    absl::StrAppend(&out, "replicas (state in etcd): ", names.empty() ? "unknown (etcd unreadable)" : absl::StrJoin(names, ", "),
                    "; asked ", endpoint, " (", status.replica_role, ")\n");
  }
  if (status.runs.empty()) return absl::StrCat(out, "no runs on the server at ", endpoint, "\n");
  for (const auto& r : status.runs) {
    absl::StrAppend(&out, "run '", r.run_id, "' at ", endpoint, ": ", r.state, ", round ", r.round, ", restarts ",
                    r.restart_count, " of ", r.max_restarts, ", world size ", r.world_size, ", nnodes ", Nnodes(r));
    if (r.lost_nodes > 0) absl::StrAppend(&out, ", ", r.lost_nodes, " lost so far");
    absl::StrAppend(&out, "\n");
    if (r.node_list.empty()) {
      absl::StrAppend(&out, "  (no nodes)\n");
      continue;
    }
    absl::StrAppend(&out, absl::StrFormat("  %-9s %-20s %-39s %-7s %-11s %s\n", "NODE_RANK", "HOST", "ADDRESS",
                                          "WORKERS", "STATE", "KEEP-ALIVE"));
    for (const auto& n : r.node_list) {
      absl::StrAppend(&out, absl::StrFormat("  %-9s %-20s %-39s %-7d %-11s %s\n",
                                            n.node_rank >= 0 ? absl::StrCat(n.node_rank) : "-", n.hostname, n.addr,
                                            n.nproc, n.state, Age(n.keepalive_age)));
    }
  }
  return out;
}

std::string FormatStatusJson(const client::ServerStatus& status, const std::string& endpoint) {
  nlohmann::json j;
  j["endpoint"] = endpoint;
  j["version"] = status.version;
  if (!status.replica_role.empty()) {
    j["replica_role"] = status.replica_role;
    j["replicas"] = nlohmann::json::array();
    for (const auto& r : status.replicas) {
      j["replicas"].push_back({{"id", r.id}, {"address", r.address}, {"leader", r.leader}});
    }
  }
  j["runs"] = nlohmann::json::array();
  for (const auto& r : status.runs) {
    nlohmann::json run = {{"run_id", r.run_id},         {"state", r.state},
                          {"round", r.round},           {"restarts", r.restart_count},
                          {"max_restarts", r.max_restarts}, {"world_size", r.world_size},
                          {"min_nodes", r.min_nodes},   {"max_nodes", r.max_nodes},
                          {"lost_nodes", r.lost_nodes}, {"kv_keys", r.kv_keys},
                          {"kv_bytes", r.kv_bytes},     {"kv_waiters", r.kv_waiters}};
    run["nodes"] = nlohmann::json::array();
    for (const auto& n : r.node_list) {
      nlohmann::json node = {{"node_rank", n.node_rank}, {"hostname", n.hostname}, {"addr", n.addr},
                             {"workers", n.nproc},       {"state", n.state}};
      if (n.keepalive_age < absl::ZeroDuration()) {
        node["keepalive_age_s"] = nullptr;
      } else {
        node["keepalive_age_s"] = absl::ToDoubleSeconds(n.keepalive_age);
      }
      run["nodes"].push_back(node);
    }
    j["runs"].push_back(run);
  }
  return j.dump() + "\n";
}

int StatusMain(int argc, char** argv) {
  CLI::App app{"meshrun status: a run as the rendezvous server sees it (token: MESHRUN_TOKEN or MESHRUN_TOKEN_FILE; "
               "TLS: MESHRUN_TLS_CA/CERT/KEY)",
               "meshrun status"};
  std::string endpoint, run_id, token_file;
  TlsFiles tls_files;
  bool watch = false, json = false;
  double interval = 2, watch_limit = 3600, timeout = 10;
  app.add_option("--rdzv_endpoint,--rdzv-endpoint", endpoint,
                 "The server, host:port (default port 29400), or its replicas h1:p,h2:p,... (the leader is asked)")
      ->envname("PET_RDZV_ENDPOINT");
  app.add_option("--rdzv_id,--rdzv-id", run_id, "Only this run (default: every run on the server)");
  app.add_flag("--watch", watch, "Redraw in place every --interval seconds until Ctrl-C");
  app.add_option("--interval", interval, "Seconds between redraws with --watch (0.1..3600)")->default_str("2");
  app.add_option("--watch_limit,--watch-limit", watch_limit, "Stop watching after this many seconds")
      ->default_str("3600");
  app.add_option("--timeout", timeout, "Seconds to wait for the server to answer (> 0)")->default_str("10");
  app.add_flag("--json", json, "One JSON object per line instead of the table");
  app.add_option("--token_file,--token-file", token_file,
                 "File holding the server's token (mode 0600; instead of MESHRUN_TOKEN)");
  app.add_option("--tls_ca,--tls-ca", tls_files.ca, "PEM CA to verify a TLS server with (MESHRUN_TLS_CA)");
  app.add_option("--tls_cert,--tls-cert", tls_files.cert,
                 "PEM certificate to present to a mutual-TLS server (MESHRUN_TLS_CERT)");
  app.add_option("--tls_key,--tls-key", tls_files.key, "PEM private key of --tls_cert (MESHRUN_TLS_KEY)");
  if (std::optional<int> done = ParseCli(app, argc, argv, "meshrun status")) return *done;
  if (endpoint.empty()) return Usage("--rdzv_endpoint is required (the server's host:port)");
  std::vector<std::string> targets;  // Replicas: every one, asked in turn.
  for (absl::string_view one : absl::StrSplit(endpoint, ',')) {
    auto ep = ParseEndpoint(std::string(one), 29400);
    if (!ep.ok()) return Usage(absl::StrCat("--rdzv_endpoint: ", ep.status().message()));
    targets.push_back(ep->ToString());
  }
  if (!(interval >= 0.1 && interval <= 3600)) {
    return Usage(absl::StrCat("--interval=", interval, ": must be 0.1..3600 seconds"));
  }
  if (!(watch_limit > 0)) return Usage(absl::StrCat("--watch_limit=", watch_limit, ": must be > 0 seconds"));
  if (!(timeout > 0)) return Usage(absl::StrCat("--timeout=", timeout, ": must be > 0 seconds"));
  absl::StatusOr<ClientAuth> auth = LoadClientAuth(token_file, tls_files);
  if (!auth.ok()) return Usage(std::string(auth.status().message()));
  // Redrawn in place on a terminal only: a pipe or a file gets the frames
  // one after the other, without control codes.
  const bool in_place = watch && !json && ::isatty(STDOUT_FILENO) == 1;

  // Ctrl-C ends --watch cleanly: wait for it between redraws.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  if (watch) pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  const absl::Time end = absl::Now() + absl::Seconds(watch_limit);
  for (;;) {
    // The first replica that answers; when it stands by, the leader it names.
    std::string target = targets.front();
    absl::StatusOr<client::ServerStatus> s = absl::UnavailableError("no endpoint");
    for (const std::string& t : targets) {
      target = t;
      s = client::QueryServerStatus(t, *auth, run_id, absl::Seconds(timeout));
      if (s.ok()) break;
    }
    if (s.ok() && s->replica_role == "standby") {
      for (const auto& r : s->replicas) {
        if (!r.leader) continue;
        // A copy: replacing `s` below frees the list `r` is in.
        const std::string leader = r.address;
        absl::StatusOr<client::ServerStatus> l = client::QueryServerStatus(leader, *auth, run_id, absl::Seconds(timeout));
        if (l.ok()) {
          s = std::move(l);
          target = leader;
        }
        break;
      }
    }
    std::string frame;
    if (s.ok()) {
      frame = json ? FormatStatusJson(*s, target) : FormatStatusTable(*s, target);
    } else if (!watch) {
      std::fprintf(stderr, "meshrun status: error: %s\n", std::string(s.status().message()).c_str());
      return 1;
    } else {
      frame = absl::StrCat("meshrun status: ", s.status().message(), "\n");
    }
    if (watch && !json) {
      frame = absl::StrCat(in_place ? "\033[H\033[2J" : "", "meshrun status, every ", interval,
                           " s (Ctrl-C to stop), ", absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone()),
                           "\n", frame);
    }
    std::fputs(frame.c_str(), stdout);
    std::fflush(stdout);
    if (!watch) return 0;
    const absl::Duration left = std::min(absl::Seconds(interval), end - absl::Now());
    if (left <= absl::ZeroDuration()) return 0;
    timespec ts = absl::ToTimespec(left);
    if (sigtimedwait(&stop, nullptr, &ts) > 0) return 0;
  }
}

}  // namespace meshrun::launcher
