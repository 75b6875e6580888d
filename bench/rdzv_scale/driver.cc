#include "bench/rdzv_scale/driver.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "bench/rdzv_scale/child.h"
#include "bench/rdzv_scale/etcd_write_latency.h"
#include "bench/rdzv_scale/kvset_latency.h"
#include "bench/rdzv_scale/preload.h"
#include "bench/rdzv_scale/load_procs.h"
#include "bench/rdzv_scale/server_process.h"
#include "bench/rdzv_scale/servers.h"

namespace meshrun::bench {
namespace {

constexpr int kMaxTracked = 256;
std::atomic<pid_t> g_tracked[kMaxTracked];

void OnStopSignal(int) {
  for (auto& p : g_tracked) {
    const pid_t pgid = p.load();
    if (pgid > 0) kill(-pgid, SIGKILL);
  }
  _exit(130);
}

double LoadAvg() {
  std::ifstream f("/proc/loadavg");
  double v = 0;
  f >> v;
  return v;
}

// The server's counters a phase's figures are the differences of, from one
// read of its metrics page.
struct ServerCounters {
  std::map<std::string, double> rpcs;           // meshrun_rpcs_total by method.
  std::map<std::string, double> store_by_node;  // meshrun_store_requests_total by node.
  double accepted = -1;                         // meshrun_connections_accepted_total; -1: unreadable.
};

ServerCounters ReadCounters(const ServerProcess& server) {
  ServerCounters c;
  absl::StatusOr<std::string> text = server.Metrics(absl::Seconds(20));
  if (!text.ok()) return c;
  c.rpcs = SumByLabel(*text, "meshrun_rpcs_total", "method");
  c.store_by_node = SumByLabel(*text, "meshrun_store_requests_total", "node");
  std::map<std::string, double> total = SumByLabel(*text, "meshrun_connections_accepted_total", "");
  if (!total.empty()) c.accepted = total.begin()->second;
  return c;
}

// What grew from `before` to `after`, by label (only the ones that grew).
std::map<std::string, double> Growth(const std::map<std::string, double>& before,
                                     const std::map<std::string, double>& after) {
  std::map<std::string, double> out;
  for (const auto& [label, v] : after) {
    auto it = before.find(label);
    const double d = v - (it == before.end() ? 0 : it->second);
    if (d > 0) out[label] = d;
  }
  return out;
}

}  // namespace

void TrackProcessGroup(pid_t pgid) {
  for (auto& p : g_tracked) {
    pid_t none = 0;
    if (p.compare_exchange_strong(none, pgid)) return;
  }
}

void UntrackProcessGroup(pid_t pgid) {
  for (auto& p : g_tracked) {
    pid_t want = pgid;
    if (p.compare_exchange_strong(want, 0)) return;
  }
}

void KillChildrenOnSignal() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

int64_t RaiseOpenFilesLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return -1;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
    getrlimit(RLIMIT_NOFILE, &r);
  }
  return static_cast<int64_t>(r.rlim_cur);
}

RunResult RunOnce(const DriverOptions& o, int n, int run_index) {
  RunResult res;
  res.n = n;
  res.run = run_index;
  res.workers_per_agent = o.agent.workers_per_agent;
  res.load_avg_1m = LoadAvg();
  const std::string tag = absl::StrCat(o.etcd ? "etcd-" : "", "n", n, "-run", run_index);
  res.state = o.etcd ? "etcd" : "memory";
  // The server, or (etcd) the replicas and etcd under them.
  ServersOptions so;
  so.meshrun_binary = o.meshrun_binary;
  so.server_args = o.server_args;
  so.log_prefix = absl::StrCat(o.work_dir, "/server-", tag);
  so.etcd = o.etcd;
  so.state_lease_ttl_s = o.state_lease_ttl_s;
  so.state_local_member = o.state_local_member;
  so.etcd_member_script = o.etcd_member_script;
  so.state_prefix = absl::StrCat("/rdzv-scale-", tag, "-", getpid());
  auto started = Servers::Start(so);
  if (!started.ok()) {
    res.failure = std::string(started.status().message());
    return res;
  }
  Servers& servers = **started;
  ServerProcess* srvp = &servers.leader();
  absl::SleepFor(absl::Milliseconds(300));
  if (auto s = srvp->Sample(true); s.ok()) {
    res.rss_idle_kib = s->rss_kib;
    res.sockets_idle = s->sockets;
  }
  // The load processes.
  const int procs_n = std::min(n, std::max(o.min_processes, (n + o.agents_per_process - 1) / o.agents_per_process));
  res.processes = procs_n;
  std::vector<std::unique_ptr<LoadProc>> procs;
  for (int p = 0; p < procs_n; ++p) {
    SimConfig c = o.agent;
    c.endpoint = servers.endpoints();
    c.run_id = absl::StrCat("rdzv-scale-", tag, "-", getpid());
    c.nnodes = n;
    c.first_index = static_cast<int>(static_cast<int64_t>(n) * p / procs_n);
    c.count = static_cast<int>(static_cast<int64_t>(n) * (p + 1) / procs_n) - c.first_index;
    auto lp = std::make_unique<LoadProc>();
    if (absl::Status s = SpawnLoad(o, c, absl::StrCat(o.work_dir, "/load-", tag, "-", p, ".log"), lp.get()); !s.ok()) {
      res.failure = std::string(s.message());
      return res;
    }
    procs.push_back(std::move(lp));
  }
  if (auto ready = ReadLines(procs, absl::Now() + absl::Seconds(60)); !ready.ok()) {
    res.failure = std::string(ready.status().message());
    return res;
  }
  // Descriptor peaks, sampled in the background (cheap: no readlink).
  std::atomic<int> peak_fds{0};
  absl::Notification stop_sampler;
  std::atomic<ServerProcess*> sampled{srvp};
  std::thread sampler([&] {
    while (!stop_sampler.WaitForNotificationWithTimeout(absl::Milliseconds(250))) {
      if (auto s = sampled.load()->Sample(false); s.ok()) {
        int cur = peak_fds.load();
        while (s->fds > cur && !peak_fds.compare_exchange_weak(cur, s->fds)) {
        }
      }
    }
  });
  ServerCounters counters_before = ReadCounters(*srvp);
  double join_first = 0;
  bool failed = false;
  PreloadedKeys preloaded;  // DriverOptions::preload_keys, once written.
  for (const std::string& phase : PhaseNames()) {
    if (o.connect_only && phase != "connect" && phase != "leave") continue;
    if (phase == "workers" && o.agent.workers_per_agent <= 0) continue;
    if (phase == "failover" && !o.etcd) continue;
    ServerProcess& srv = *srvp;
    if (phase == "workers") {
      // Untimed, in every load process before any starts its clock: the
      // proxies, the workers' channels and their planned requests.
      if (absl::Status s = PrepareWorkers(procs, n * o.agent.workers_per_agent, o.agent.phase_timeout); !s.ok()) {
        res.failure = absl::StrCat("workers: ", s.message());
        failed = true;
        break;
      }
    }
    PhaseStats st;
    st.expected = phase == "workers" ? n * o.agent.workers_per_agent : n;
    peak_fds = 0;
    absl::StatusOr<ProcSample> before = srv.Sample(false);
    std::string cmd = phase == "round_closed" ? "roundclosed" : phase == "exit_barrier" ? "finish" : phase;
    if (phase == "failover") {
      // The leader's host dies: its replica and its etcd member, together.
      res.failover_from = servers.leader_index();
      cmd = absl::StrFormat("failover %s %.6f", srv.endpoint(), MonoNow());
      sampled = &servers.other();
      servers.KillLeaderHost();
    }
    auto lines = CommandAll(procs, cmd, absl::Now() + o.agent.phase_timeout + absl::Seconds(60));
    if (phase == "failover") {
      if (!servers.AwaitNextLeader(absl::Seconds(30))) {
        res.failure = "failover: no other replica led within 30 s";
        failed = true;
        break;
      }
      res.failover_to = servers.leader_index();
      srvp = &servers.leader();
      sampled = srvp;
      // CPU and counters of another process: the phase's figures are the new
      // leader's, from its start.
      before = ProcSample();
      counters_before = ServerCounters();
    }
    ServerProcess& now = *srvp;
    absl::StatusOr<ProcSample> after = now.Sample(true);
    ServerCounters counters_after = ReadCounters(now);
    if (before.ok() && after.ok()) {
      st.server_cpu_s = after->cpu_s - before->cpu_s;
      st.sockets_end = after->sockets;
      st.rss_end_kib = after->rss_kib;
    } else {
      res.failure = "the server process is gone";
    }
    st.rpcs = Growth(counters_before.rpcs, counters_after.rpcs);
    for (const auto& [m, d] : st.rpcs) st.requests += d;
    st.store_by_node = Growth(counters_before.store_by_node, counters_after.store_by_node);
    if (counters_before.accepted >= 0 && counters_after.accepted >= 0) {
      st.accepted = counters_after.accepted - counters_before.accepted;
    }
    counters_before = std::move(counters_after);
    st.peak_fds = peak_fds.load();
    if (!lines.ok()) {
      res.failure = std::string(lines.status().message());
      res.phases[phase] = st;
      failed = true;
      break;
    }
    double start = 1e300, end = 0;
    int64_t rank_sum = 0;
    std::string error;
    SimCounters total;
    for (const std::string& line : *lines) {
      ChildResult cr = ParseChildResult(line);
      if (!cr.parsed) {
        error = absl::StrCat("malformed answer from a load process: ", line.substr(0, 200));
        continue;
      }
      st.ok += cr.r.ok;
      rank_sum += cr.r.rank_sum;
      if (cr.r.start > 0) start = std::min(start, cr.r.start);
      if (cr.r.first > 0 && phase == "join") join_first = join_first == 0 ? cr.r.first : std::min(join_first, cr.r.first);
      end = std::max(end, cr.r.end);
      if (error.empty() && !cr.r.error.empty()) error = cr.r.error;
      total.heartbeats_ok += cr.counters.heartbeats_ok;
      total.heartbeats_failed += cr.counters.heartbeats_failed;
      total.streams_lost += cr.counters.streams_lost;
      if (res.first_heartbeat_error.empty()) res.first_heartbeat_error = cr.counters.first_heartbeat_error;
    }
    // Round-closed delivery: from the first sign that the round closed (an
    // assignment or a ROUND_CLOSED event, whichever came first) to the last
    // agent's ROUND_CLOSED event.
    if (phase == "round_closed") {
      double first = join_first;
      for (const std::string& line : *lines) {
        ChildResult cr = ParseChildResult(line);
        if (cr.parsed && cr.r.first > 0) first = first == 0 ? cr.r.first : std::min(first, cr.r.first);
      }
      start = first > 0 ? first : 1e300;
    }
    st.seconds = end > 0 && start < 1e299 ? end - start : -1;
    res.heartbeats_ok = total.heartbeats_ok;
    res.heartbeats_failed = total.heartbeats_failed;
    res.streams_lost = total.streams_lost;
    if (phase == "join" && after.ok()) res.rss_joined_kib = after->rss_kib;
    res.phases[phase] = st;
    if (st.ok < st.expected) {
      res.failure = absl::StrCat(phase, ": ", st.ok, " of ", st.expected, phase == "workers" ? " workers" : " agents",
                                 " succeeded", error.empty() ? "" : ": ", error);
      failed = true;
      break;
    }
    if (phase == "join" && rank_sum != static_cast<int64_t>(n) * (n - 1) / 2) {
      res.failure = absl::StrCat("join: node ranks are not 0..", n - 1, " each once (sum ", rank_sum, ")");
      failed = true;
      break;
    }
    if (phase == "round_closed") {
      // The job runs: every agent connected, heartbeating, its stream open.
      absl::SleepFor(o.steady_wait);
      if (auto s = srv.Sample(false); s.ok()) res.rss_steady_kib = s->rss_kib;
      if (o.kvset_count > 0) {
        absl::StatusOr<KvSetLatency> k =
            MeasureKvSet(srv.endpoint(), absl::StrCat("rdzv-scale-kvset-", tag, "-", getpid()), o.kvset_count);
        if (!k.ok()) {
          res.failure = absl::StrCat("kvset: ", k.status().message());
          failed = true;
          break;
        }
        res.kvset_count = k->count;
        res.kvset_p50_ms = k->p50_ms;
        res.kvset_p99_ms = k->p99_ms;
        if (o.kvset_concurrent > 0) {
          absl::StatusOr<ConcurrentKvSets> c = MeasureConcurrentKvSets(
              srv.endpoint(), absl::StrCat("rdzv-scale-kvset-", tag, "-", getpid()), o.kvset_concurrent, 16);
          if (!c.ok()) {
            res.failure = absl::StrCat("concurrent kvset: ", c.status().message());
            failed = true;
            break;
          }
          res.kvset_concurrent = c->count;
          res.kvset_concurrent_all_ms = c->all_ms;
          res.kvset_concurrent_p50_ms = c->p50_ms;
        }
        if (o.etcd) {
          absl::StatusOr<EtcdWriteLatency> e =
              MeasureEtcdWrites(servers.LeaderEtcdUrl(so.state_prefix), so.state_prefix + "-etcd-writes",
                                o.kvset_count);
          if (!e.ok()) {
            res.failure = absl::StrCat("etcd writes: ", e.status().message());
            failed = true;
            break;
          }
          res.etcd_write_count = e->count;
          res.etcd_put_p50_ms = e->put_p50_ms;
          res.etcd_fenced_p50_ms = e->fenced_p50_ms;
          res.etcd_fenced_p99_ms = e->fenced_p99_ms;
        }
        // Its connection and requests belong to no phase.
        counters_before = ReadCounters(srv);
      }
      if (o.etcd && o.preload_keys > 0) {
        absl::StatusOr<PreloadedKeys> p =
            PreloadKeys(srv.endpoint(), absl::StrCat("rdzv-scale-keys-", tag, "-", getpid()), o.preload_keys,
                        o.preload_keys_per_run, o.preload_value_bytes);
        if (!p.ok()) {
          res.failure = std::string(p.status().message());
          failed = true;
          break;
        }
        preloaded = *p;
        res.preload_keys = p->keys;
        res.preload_s = p->seconds;
        std::fprintf(stderr, "rdzv_scale: %lld keys written in %.1f s over %zu runs\n",
                     static_cast<long long>(p->keys), p->seconds, p->run_ids.size());
        counters_before = ReadCounters(srv);
      }
    }
    if (phase == "failover" && !preloaded.run_ids.empty()) {
      // What the next leader holds (after the phase's clock stopped).
      absl::StatusOr<int64_t> held = CountKeys(srvp->endpoint(), preloaded.run_ids);
      if (!held.ok()) {
        res.failure = absl::StrCat("keys after the failover: ", held.status().message());
        failed = true;
        break;
      }
      res.keys_after_failover = *held;
      if (*held != preloaded.keys) {
        res.failure = absl::StrCat("the next leader holds ", *held, " of the ", preloaded.keys, " keys written");
        failed = true;
        break;
      }
      counters_before = ReadCounters(*srvp);
    }
  }
  stop_sampler.Notify();
  sampler.join();
  if (!failed) {
    // Every agent left: wait for the server to close their connections,
    // then let it settle before reading its memory.
    const absl::Time deadline = absl::Now() + o.close_wait;
    ServerProcess& srv = *srvp;
    for (;;) {
      auto s = srv.Sample(true);
      if (!s.ok() || s->sockets <= res.sockets_idle || absl::Now() > deadline) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    absl::SleepFor(o.settle);
    if (auto s = srv.Sample(true); s.ok()) {
      res.rss_after_kib = s->rss_kib;
      res.rss_peak_kib = s->hwm_kib;
      res.sockets_after = s->sockets;
    }
    res.complete = true;
  } else if (auto s = srvp->Sample(false); s.ok()) {
    res.rss_peak_kib = s->hwm_kib;
  }
  for (auto& p : procs) {
    const char quit[] = "quit\n";
    (void)!write(p->fd, quit, sizeof quit - 1);
  }
  for (auto& p : procs) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    int status = 0;
    while (waitpid(p->pid, &status, WNOHANG) == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    if (waitpid(p->pid, &status, WNOHANG) != 0) p->pid = -1;  // Reaped (or already).
  }
  return res;
}

}  // namespace meshrun::bench
