#include "launcher/status_cmd.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/endpoint.h"
#include "common/security.h"
#include "launcher/cli.h"
#include "nlohmann/json.hpp"
#include "rendezvous/run/run_timeline.h"

namespace meshrun::launcher {
namespace {

std::string Age(absl::Duration d) {
  if (d < absl::ZeroDuration()) return "-";
  return absl::StrFormat("%.1fs ago", absl::ToDoubleSeconds(d));
}

std::string Nnodes(const rendezvous::RunStatus& r) {
  return r.min_nodes == r.max_nodes ? absl::StrCat(r.max_nodes) : absl::StrCat(r.min_nodes, ":", r.max_nodes);
}

// "leading", "standing by", "serving" (a single server) or "unreachable":
// one replica asked, in a word (the table's state, the JSON's "state").
std::string StateWord(const ReplicaProbe& p) {
  if (!p.answer.ok()) return "unreachable";
  if (p.answer->replica_role == "leader") return "leading";
  return p.answer->replica_role == "standby" ? "standing by" : "serving";
}

// "leading for 12.3s", "standing by" or "unreachable: why" for one replica
// asked.
std::string ReplicaState(const ReplicaProbe& p, absl::Time now) {
  if (!p.answer.ok()) {
    // The cause alone: the row names the replica already.
    absl::string_view why = p.answer.status().message();
    absl::ConsumePrefix(&why, absl::StrCat("rendezvous server at ", p.endpoint, " is unreachable: "));
    absl::ConsumePrefix(&why, absl::StrCat(p.endpoint, ": "));
    return absl::StrCat("unreachable: ", why);
  }
  if (p.answer->replica_role == "leader" && p.answer->leading_since != absl::InfinitePast()) {
    return absl::StrFormat("leading for %.1fs", absl::ToDoubleSeconds(now - p.answer->leading_since));
  }
  const std::string word = StateWord(p);
  return word == "serving" ? "serving (a single server)" : word;
}

// "2 running, 1 finished" for a run's nodes, in the order states first appear.
std::string NodeSummary(const rendezvous::RunStatus& r) {
  std::vector<std::pair<std::string, int>> counts;
  for (const auto& n : r.node_list) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == n.state; });
    if (it == counts.end()) {
      counts.emplace_back(n.state, 1);
    } else {
      ++it->second;
    }
  }
  std::vector<std::string> parts;
  for (const auto& [state, n] : counts) parts.push_back(absl::StrCat(n, " ", state));
  return absl::StrJoin(parts, ", ");
}

// "12.3s", "5m12s", "2h03m": an age for people.
std::string Ago(absl::Duration d) {
  if (d < absl::Minutes(1)) return absl::StrFormat("%.1fs", absl::ToDoubleSeconds(std::max(d, absl::ZeroDuration())));
  const int64_t s = absl::ToInt64Seconds(d);
  if (d < absl::Hours(1)) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
}

std::string When(absl::Time t) { return absl::FormatTime("%Y-%m-%d %H:%M:%E3S", t, absl::UTCTimeZone()); }

// Asks every endpoint for its status, each on a thread of its own, all
// within `timeout`; the answers in the endpoints' order.
std::vector<ReplicaProbe> AskEvery(const std::vector<std::string>& endpoints, const ClientAuth& auth,
                                   const std::string& run_id, absl::Duration timeout, bool events) {
  std::vector<ReplicaProbe> asked;
  for (const std::string& e : endpoints) asked.push_back({e, absl::UnavailableError("not asked")});
  if (asked.size() == 1) {
    asked[0].answer = client::QueryServerStatus(endpoints[0], auth, run_id, timeout, events);
    return asked;
  }
  std::vector<std::thread> threads;
  for (ReplicaProbe& p : asked) {
    threads.emplace_back([&p, &auth, &run_id, timeout, events] {
      p.answer = client::QueryServerStatus(p.endpoint, auth, run_id, timeout, events);
    });
  }
  for (std::thread& t : threads) t.join();
  return asked;
}

int Usage(const std::string& msg) {
  std::fprintf(stderr, "meshrun status: error: %s\n", msg.c_str());
  return 2;
}

}  // namespace

std::vector<ReplicaRow> ReplicaRows(const client::ServerStatus& status, const std::vector<ReplicaProbe>& asked,
                                    absl::Time now) {
  std::vector<ReplicaRow> rows;
  std::vector<std::string> seen;
  for (const ReplicaProbe& p : asked) {
    const std::string self = p.answer.ok() ? p.answer->replica_self : "";
    ReplicaRow row;
    row.replica = self.empty() || self == p.endpoint ? p.endpoint : absl::StrCat(self, " (as ", p.endpoint, ")");
    row.state = ReplicaState(p, now);
    rows.push_back(std::move(row));
    seen.push_back(self.empty() ? p.endpoint : self);
  }
  for (const auto& r : status.replicas) {
    if (std::find(seen.begin(), seen.end(), r.address) != seen.end()) continue;
    rows.push_back({r.address, absl::StrCat(r.leader ? "leading" : "standing by", " (in etcd's election; not asked)")});
  }
  return rows;
}

std::string FormatStatusTable(const client::ServerStatus& status, const std::string& endpoint,
                              const std::vector<ReplicaProbe>& asked, absl::Time now) {
  std::string out;
  if (!status.replicas.empty() || !status.replica_role.empty()) {
    std::vector<std::string> names;
    for (const auto& r : status.replicas) names.push_back(absl::StrCat(r.address, r.leader ? " (leader)" : ""));
    absl::StrAppend(&out, "replicas (state in etcd): ", names.empty() ? "unknown (etcd unreadable)" : absl::StrJoin(names, ", "),
                    "; asked ", endpoint, " (", status.replica_role, ")\n");
  }
  if (asked.size() > 1 || !status.replica_role.empty()) {
    const std::vector<ReplicaRow> rows = ReplicaRows(status, asked, now);
    size_t width = 7;
    for (const ReplicaRow& r : rows) width = std::max(width, r.replica.size());
    absl::StrAppend(&out, absl::StrFormat("  %-*s %s\n", static_cast<int>(width), "REPLICA", "STATE"));
    for (const ReplicaRow& r : rows) {
      absl::StrAppend(&out, absl::StrFormat("  %-*s %s\n", static_cast<int>(width), r.replica, r.state));
    }
  }
  if (status.runs.empty()) return absl::StrCat(out, "no runs on the server at ", endpoint, "\n");
  for (const auto& r : status.runs) {
    absl::StrAppend(&out, "run '", r.run_id, "' at ", endpoint, ": ", r.state, ", round ", r.round, ", restarts ",
                    r.restart_count, " of ", r.max_restarts, ", world size ", r.world_size, ", nnodes ", Nnodes(r));
    if (r.lost_nodes > 0) absl::StrAppend(&out, ", ", r.lost_nodes, " lost so far");
    absl::StrAppend(&out, "\n");
    if (r.created != absl::InfinitePast()) {
      absl::StrAppend(&out, "  started ", Ago(now - r.created), " ago");
      if (r.root_cause) {
        absl::StrAppend(&out, "; last root cause",
                        r.root_cause->time == absl::Time() ? "" : absl::StrCat(" ", Ago(now - r.root_cause->time), " ago"),
                        ": ", rendezvous::DescribeRootCause(*r.root_cause));
      }
      absl::StrAppend(&out, "\n");
    }
    if (!r.timeline.empty()) {
      absl::StrAppend(&out, "  events (UTC, oldest first",
                      r.timeline_dropped > 0 ? absl::StrCat("; ", r.timeline_dropped, " older dropped") : "", "):\n");
      for (const rendezvous::TimelineEvent& e : r.timeline) {
        absl::StrAppend(&out, absl::StrFormat("    %s  %-9s  %s\n", When(e.time), e.kind, e.detail));
      }
    }
    for (const auto& l : status.lighthouses) {
      if (l.run_id != r.run_id) continue;
      absl::StrAppend(&out, "  lighthouse (torchft): quorum ", l.quorum_id, " of ", l.quorum_members,
                      " replica groups; ", l.replica_groups, " known, ", l.waiting, " waiting",
                      l.reason.empty() ? "" : absl::StrCat("; last look: ", l.reason), "\n");
      if (!l.member_steps.empty()) {
        // Each group's step as of the last quorum (the first 16; --json has all).
        absl::StrAppend(&out, "  steps at that quorum:");
        const size_t shown = std::min<size_t>(l.member_steps.size(), 16);
        for (size_t i = 0; i < shown; ++i) {
          absl::StrAppend(&out, i == 0 ? " " : ", ", l.member_steps[i].first.substr(0, 64), " ",
                          l.member_steps[i].second);
        }
        if (shown < l.member_steps.size()) absl::StrAppend(&out, ", ... ", l.member_steps.size() - shown, " more");
        absl::StrAppend(&out, "\n");
      }
    }
    if (r.node_list.empty()) {
      absl::StrAppend(&out, "  (no nodes)\n");
      continue;
    }
    absl::StrAppend(&out, "  nodes: ", NodeSummary(r), "\n");
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

std::string FormatStatusJson(const client::ServerStatus& status, const std::string& endpoint,
                             const std::vector<ReplicaProbe>& asked, absl::Time now) {
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
  if (asked.size() > 1 || !status.replica_role.empty()) {
    j["asked"] = nlohmann::json::array();
    for (const ReplicaProbe& p : asked) {
      nlohmann::json one = {{"endpoint", p.endpoint}, {"state", StateWord(p)}};
      if (!p.answer.ok()) {
        one["reason"] = std::string(p.answer.status().message());
      } else {
        one["address"] = p.answer->replica_self;
        if (p.answer->leading_since != absl::InfinitePast()) {
          one["leading_for_s"] = absl::ToDoubleSeconds(now - p.answer->leading_since);
        }
      }
      j["asked"].push_back(std::move(one));
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
    if (r.created != absl::InfinitePast()) {
      run["created_ms"] = absl::ToUnixMillis(r.created);
      run["age_s"] = absl::ToDoubleSeconds(now - r.created);
    }
    if (r.root_cause) {
      const rendezvous::WorkerFailure& f = *r.root_cause;
      run["root_cause"] = {{"node_id", f.node_id}, {"hostname", f.hostname}, {"node_rank", f.node_rank},
                           {"rank", f.rank},       {"local_rank", f.local_rank}, {"exit_code", f.exit_code},
                           {"signal", f.signal},   {"round", f.round},           {"permanent", f.permanent},
                           {"time_ms", f.time == absl::Time() ? 0 : absl::ToUnixMillis(f.time)},
                           {"summary", rendezvous::DescribeRootCause(f)}};
    }
    if (!r.timeline.empty()) {
      run["timeline"] = nlohmann::json::array();
      for (const rendezvous::TimelineEvent& e : r.timeline) {
        run["timeline"].push_back({{"time_ms", absl::ToUnixMillis(e.time)}, {"kind", e.kind}, {"detail", e.detail}});
      }
      run["timeline_dropped"] = r.timeline_dropped;
    }
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
    for (const auto& l : status.lighthouses) {
      if (l.run_id != r.run_id) continue;
      run["lighthouse"] = {{"quorum_id", l.quorum_id},           {"quorum_members", l.quorum_members},
                           {"replica_groups", l.replica_groups}, {"waiting", l.waiting},
                           {"reason", l.reason}};
      run["lighthouse"]["member_steps"] = nlohmann::json::array();
      for (const auto& [replica_id, step] : l.member_steps) {
        run["lighthouse"]["member_steps"].push_back({{"replica_id", replica_id}, {"step", step}});
      }
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
  bool watch = false, json = false, events = false;
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
  app.add_flag("--events", events,
               "Also each run's timeline (rounds, restarts with their root cause, lost nodes, re-forms, failovers, "
               "its end), oldest first");
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
    // Every replica given, at once; the runs from the leader among them,
    // else from the first that answers, or the leader that one names.
    std::vector<ReplicaProbe> asked = AskEvery(targets, *auth, run_id, absl::Seconds(timeout), events);
    std::string target = targets.front();
    absl::StatusOr<client::ServerStatus> s = absl::UnavailableError("no endpoint");
    for (const ReplicaProbe& p : asked) {
      if (p.answer.ok() && p.answer->replica_role == "leader") {
        s = p.answer;
        target = p.endpoint;
        break;
      }
    }
    for (size_t i = 0; !s.ok() && i < asked.size(); ++i) {
      target = asked[i].endpoint;
      s = asked[i].answer;
    }
    if (s.ok() && s->replica_role == "standby") {
      for (const auto& r : s->replicas) {
        if (!r.leader) continue;
        // A copy: replacing `s` below frees the list `r` is in.
        const std::string leader = r.address;
        absl::StatusOr<client::ServerStatus> l =
            client::QueryServerStatus(leader, *auth, run_id, absl::Seconds(timeout), events);
        if (l.ok()) {
          s = std::move(l);
          target = leader;
        }
        break;
      }
    }
    std::string frame;
    if (s.ok()) {
      frame = json ? FormatStatusJson(*s, target, asked, absl::Now()) : FormatStatusTable(*s, target, asked, absl::Now());
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
