// bench/rdzv_scale: N simulated node agents (the real client::RendezvousClient,
// production connection settings) against one `meshrun server` process, at
// several N; torchrun's c10d rendezvous at small N in the same run. See
// docs/performance.md, "Rendezvous at scale", and --help.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "bench/rdzv_scale/c10d_runner.h"
#include "bench/rdzv_scale/child.h"
#include "bench/rdzv_scale/driver.h"
#include "bench/rdzv_scale/report.h"

namespace mb = meshrun::bench;

namespace {

// "64,256" -> {64, 256}; an error names the bad item.
bool ParseList(const std::string& text, const char* flag, std::vector<int>* out) {
  out->clear();
  for (absl::string_view s : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(s, &v) || v < 1) {
      std::fprintf(stderr, "rdzv_scale: error: %s=%s: '%s' is not a positive integer (a comma-separated list)\n", flag,
                   text.c_str(), std::string(s).c_str());
      return false;
    }
    out->push_back(v);
  }
  return true;
}

std::string SelfPath() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : p.string();
}

}  // namespace

int main(int argc, char** argv) {
  // As meshrun's own main (launcher/main.cc): the simulated agents run with
  // the settings of a real agent.
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  CLI::App app{"rdzv_scale: N simulated agents (the node agent's own RendezvousClient) against one meshrun server; "
               "torchrun's c10d rendezvous at small N side by side"};
  std::string agents_text = "64,256,1024,4096,10000";
  int runs = 3;
  std::string csv = "rdzv_scale.csv";
  std::string table_path;
  std::string meshrun = MESHRUN_BINARY;
  std::string work_dir;
  std::vector<std::string> server_args;
  double keep_alive = 5, phase_timeout = 120, settle = 3;
  mb::DriverOptions o;
  mb::C10dOptions c10d;
  std::string c10d_agents_text = "64,256";
  std::string state_modes_text = "memory";
  c10d.script = RDZV_SCALE_SOURCE_DIR "/c10d_rdzv.py";
  app.add_option("--agents", agents_text, "Comma-separated N (simulated agents) to measure")->capture_default_str();
  app.add_option("--runs", runs, "Runs per N (the table shows medians)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--csv", csv, "One row per run")->capture_default_str();
  app.add_option("--table", table_path, "Also write the Markdown table of medians here");
  app.add_option("--meshrun", meshrun, "The meshrun binary that serves (`meshrun server`)")->capture_default_str();
  app.add_option("--work_dir", work_dir, "Logs of the server and load processes (default: a fresh temporary folder)");
  app.add_option("--server_arg", server_args, "One more `meshrun server` argument (repeatable), e.g. --server_arg=--limit=max_runs=8");
  app.add_option("--agents_per_process", o.agents_per_process, "Simulated agents per load process")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--min_processes", o.min_processes, "At least this many load processes")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--nproc", o.agent.nproc, "Workers per simulated node (its nproc)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--keep_alive_interval", keep_alive, "Seconds between an agent's heartbeats (the agent's default)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--connect_concurrency", o.agent.connect_concurrency, "Connects in flight per load process")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--watch_first", o.agent.watch_first,
               "Open each agent's event stream when it connects, before joining (the order before issue 23; "
               "A/B runs: give the server --limit=max_nonmember_watchers_per_run of at least the agents)");
  bool held_joins = false;
  app.add_flag("--held_joins", held_joins,
               "Hold each join's call open until its round closes (the agent's way before stop 29) instead of "
               "answering it on the event stream; for A/B runs");
  app.add_option("--heartbeat_threads", o.agent.heartbeat_threads, "Heartbeat threads per load process")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--phase_timeout", phase_timeout, "Seconds one phase may take before the run counts as failed")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--kvset", o.kvset_count,
                 "KvSets timed one at a time from one store client after the round closed (p50/p99 in the table; "
                 "etcd runs: as many plain Puts and fenced Txns timed on etcd alone after them; 0: none)")
      ->default_str("200")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--kvset_concurrent", o.kvset_concurrent,
                 "KvSets sent at once over 16 connections after the timed ones (all answered: first send to last "
                 "answer; 0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  app.add_option("--preload_keys", o.preload_keys,
                 "etcd runs: store keys written through the leader after the round closed, for the next leader to "
                 "load at the failover (store-only runs of --preload_keys_per_run keys; 0: none); the next leader "
                 "must hold them all")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{100000000}));
  app.add_option("--preload_keys_per_run", o.preload_keys_per_run,
                 "Keys per store-only run of --preload_keys (at most the server's max_keys_per_run)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  app.add_option("--preload_value_bytes", o.preload_value_bytes, "Bytes per value of --preload_keys")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  double steady_wait = 3;
  app.add_option("--steady_wait", steady_wait,
                 "Seconds after the round closed before the server's steady memory is read (agents still connected)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--settle", settle, "Seconds after every connection closed before the server's memory is read")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--connect_only", o.connect_only,
               "Diagnostic: only connect (event streams open) and leave, no rendezvous: the server's cost per connection");
  app.add_option("--workers_per_agent", o.agent.workers_per_agent,
                 "Simulated workers per agent fetching a 3-D mesh's unique ids through their agent's store proxy "
                 "(0: no workers phase); mesh (N, 2, W/2)")
      ->capture_default_str();
  app.add_option("--state_modes", state_modes_text,
                 "Comma-separated: memory (one in-memory server), etcd (3 replicas sharing a 3-member etcd, "
                 "with a failover phase: the leader's replica and etcd member SIGKILLed after the round closed)")
      ->capture_default_str();
  app.add_option("--state_local_member", o.state_local_member,
                 "The replicas' --state_local_member (etcd runs): auto (the default: replica i's etcd member is i, "
                 "listed first, so etcd's leader is kept off the leading replica's member) or none")
      ->default_str("auto");
  app.add_option("--state_lease_ttl", o.state_lease_ttl_s, "Seconds: the replicas' --state_lease_ttl (etcd runs)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--c10d_agents", c10d_agents_text, "N for torchrun's c10d rendezvous (empty: skip)")->capture_default_str();
  app.add_option("--c10d_runs", c10d.runs, "Runs per N for c10d (default: --runs)");
  app.add_option("--c10d_timeout", c10d.timeout_s, "Seconds one c10d run may take")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--python", c10d.python, "Python with PyTorch 1.13 (Debian's)")->capture_default_str();
  app.add_option("--c10d_script", c10d.script, "bench/rdzv_scale/c10d_rdzv.py")->capture_default_str();
  // The load processes: this binary again.
  bool child = false;
  mb::SimConfig& cc = o.agent;
  app.add_flag("--child", child)->group("");
  app.add_option("--endpoint", cc.endpoint)->group("");
  app.add_option("--run_id", cc.run_id)->group("");
  app.add_option("--first", cc.first_index)->group("");
  app.add_option("--count", cc.count)->group("");
  app.add_option("--nnodes", cc.nnodes)->group("");
  app.add_option("--keep_alive_max_attempt", cc.keep_alive_max_attempt)->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.agent.keep_alive_interval = absl::Seconds(keep_alive);
  o.agent.join_on_stream = !held_joins;
  o.agent.phase_timeout = absl::Seconds(phase_timeout);
  o.settle = absl::Seconds(settle);
  o.steady_wait = absl::Seconds(steady_wait);
  if (child) return mb::ChildMain(o.agent);

  std::vector<int> ns, c10d_ns;
  if (!ParseList(agents_text, "--agents", &ns) || !ParseList(c10d_agents_text, "--c10d_agents", &c10d_ns)) return 2;
  if (c10d.runs <= 0) c10d.runs = runs;
  if (access(meshrun.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "rdzv_scale: error: --meshrun=%s is not an executable\n", meshrun.c_str());
    return 2;
  }
  std::vector<std::string> state_modes = absl::StrSplit(state_modes_text, ',', absl::SkipEmpty());
  for (const std::string& m : state_modes) {
    if (m != "memory" && m != "etcd") {
      std::fprintf(stderr, "rdzv_scale: error: --state_modes=%s: '%s' is not memory or etcd\n", state_modes_text.c_str(),
                   m.c_str());
      return 2;
    }
  }
  if (state_modes.empty()) {
    std::fprintf(stderr, "rdzv_scale: error: --state_modes is empty (memory, etcd or both)\n");
    return 2;
  }
  o.etcd_member_script = std::string(RDZV_SCALE_SOURCE_DIR) + "/../../tests/etcd/etcd_member.sh";
  o.meshrun_binary = meshrun;
  o.self_binary = SelfPath();
  o.server_args = server_args;
  if (work_dir.empty()) {
    char tmpl[] = "/tmp/rdzv_scale.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::perror("rdzv_scale: mkdtemp");
      return 1;
    }
    work_dir = tmpl;
  }
  std::filesystem::create_directories(work_dir);
  o.work_dir = work_dir;
  const int64_t nofile = mb::RaiseOpenFilesLimit();
  int max_n = 0;
  for (int n : ns) max_n = std::max(max_n, n);
  std::fprintf(stderr, "rdzv_scale: open files limit %lld (raised to the hard limit; the server needs about %d)\n",
               static_cast<long long>(nofile), max_n + 64);
  if (nofile < max_n + 64) {
    std::fprintf(stderr, "rdzv_scale: warning: the open files limit %lld is below what %d agents need\n",
                 static_cast<long long>(nofile), max_n);
  }
  std::fprintf(stderr, "rdzv_scale: logs in %s\n", work_dir.c_str());
  // A signal stops everything this run started.
  ::signal(SIGPIPE, SIG_IGN);
  mb::KillChildrenOnSignal();

  std::vector<mb::RunResult> results;
  for (int n : ns) {
    for (int run = 1; run <= runs; ++run) {
      // The state modes interleaved, run by run: both see the same load.
      for (const std::string& mode : state_modes) {
        o.etcd = mode == "etcd";
        mb::RunResult r = mb::RunOnce(o, n, run);
        std::fprintf(stderr, "rdzv_scale: N=%d run %d (%s): %s", n, run, mode.c_str(), r.complete ? "complete" : "FAILED");
        for (const std::string& p : mb::PhaseNames()) {
          if (r.phases.count(p)) std::fprintf(stderr, " %s=%.3fs", p.c_str(), r.phases.at(p).seconds);
        }
        if (r.kvset_count > 0) std::fprintf(stderr, " kvset_p50=%.3fms kvset_p99=%.3fms", r.kvset_p50_ms, r.kvset_p99_ms);
        if (r.etcd_write_count > 0) {
          std::fprintf(stderr, " etcd_put_p50=%.3fms etcd_fenced_p50=%.3fms etcd_fenced_p99=%.3fms", r.etcd_put_p50_ms,
                       r.etcd_fenced_p50_ms, r.etcd_fenced_p99_ms);
        }
        if (r.kvset_concurrent > 0) {
          std::fprintf(stderr, " kvset_concurrent=%d all=%.1fms p50=%.1fms", r.kvset_concurrent,
                       r.kvset_concurrent_all_ms, r.kvset_concurrent_p50_ms);
        }
        if (r.preload_keys > 0) {
          std::fprintf(stderr, " preload=%lld keys in %.1fs held_after_failover=%lld", static_cast<long long>(r.preload_keys),
                       r.preload_s, static_cast<long long>(r.keys_after_failover));
        }
        std::fprintf(stderr, " rss_idle=%.1fMiB joined=%.1fMiB steady=%.1fMiB peak=%.1fMiB after=%.1fMiB hb_failed=%lld%s%s lost=%lld%s%s\n",
                     r.rss_idle_kib / 1024.0, r.rss_joined_kib / 1024.0, r.rss_steady_kib / 1024.0, r.rss_peak_kib / 1024.0,
                     r.rss_after_kib / 1024.0, static_cast<long long>(r.heartbeats_failed),
                     r.first_heartbeat_error.empty() ? "" : " first:", r.first_heartbeat_error.c_str(),
                     static_cast<long long>(r.streams_lost), r.failure.empty() ? "" : ": ", r.failure.c_str());
        results.push_back(std::move(r));
        mb::WriteCsv(csv, results, {});
      }
    }
  }
  std::vector<mb::C10dResult> c10d_results;
  if (!c10d_ns.empty()) {
    c10d.agents = c10d_ns;
    c10d_results = mb::RunC10d(c10d, work_dir);
  }
  if (!mb::WriteCsv(csv, results, c10d_results)) {
    std::fprintf(stderr, "rdzv_scale: error: cannot write --csv=%s\n", csv.c_str());
    return 1;
  }
  const std::string table = mb::Table(results, c10d_results);
  std::printf("%s", table.c_str());
  if (!table_path.empty()) std::ofstream(table_path) << table;
  bool all = true;
  for (const auto& r : results) all &= r.complete;
  return all ? 0 : 1;
}
