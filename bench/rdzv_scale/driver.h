// bench/rdzv_scale: one measured run at one N. Starts the server, starts the
// load processes (this binary with --child, each with a slice of the N
// agents), steps them through the phases together and reads the server
// between phases. Phases: connect, join (first Join sent -> every
// assignment), round_closed (first assignment -> every ROUND_CLOSED event),
// exit_barrier (first ReportFinished -> every barrier answered), leave
// (every client destroyed).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "bench/rdzv_scale/sim_agents.h"

namespace meshrun::bench {

struct DriverOptions {
  std::string meshrun_binary;  // The server: `meshrun server`.
  std::string self_binary;     // This program, started with --child.
  std::string work_dir;        // Logs of the server and the load processes.
  int agents_per_process = 1000;
  int min_processes = 2;
  SimConfig agent;             // Shared settings (endpoint, slice and run id are set per run).
  std::vector<std::string> server_args;  // Extra `meshrun server` arguments.
  // After the last agent left: how long to wait for the server's sockets
  // to close (bounded), then how long before reading its memory.
  absl::Duration close_wait = absl::Seconds(30);
  absl::Duration settle = absl::Seconds(3);
  // After the round closed, every agent still connected: how long to wait
  // before reading the server's steady memory (its memory_release_delay
  // gives the joins' transient memory back meanwhile).
  absl::Duration steady_wait = absl::Seconds(3);
  // Then, every agent still connected: this many KvSets of one store
  // client, one at a time, timed (kvset_latency.h); 0: none.
  int kvset_count = 200;
  // Then this many KvSets at once over 16 connections
  // (MeasureConcurrentKvSets); 0: none.
  int kvset_concurrent = 1000;
  // Then (etcd runs) this many store keys written through the leader into
  // store-only runs of at most preload_keys_per_run keys each
  // (preload.h), for the next leader to load at the failover; 0: none.
  int64_t preload_keys = 0;
  int64_t preload_keys_per_run = 250000;
  int preload_value_bytes = 128;
  // Diagnostic: connect and leave only (no join, no exit barrier), to see
  // what the server holds per connection alone.
  bool connect_only = false;
  // The state in etcd (issue 24): a 3-member etcd (etcd_members.h) and 3
  // `meshrun server --state` replicas, replica i listing member i first;
  // the agents are given all three. Adds the failover phase: after the
  // round closed, the leading replica and its etcd member are SIGKILLed
  // together (its host dying), timed until every agent uses the next
  // leader; the exit barrier then runs on that leader.
  bool etcd = false;
  int state_lease_ttl_s = 2;        // --state_lease_ttl of the replicas (the server's default).
  std::string state_local_member = "auto";  // --state_local_member of the replicas (the server's default).
  std::string etcd_member_script;   // tests/etcd/etcd_member.sh
};

inline const std::vector<std::string>& PhaseNames() {
  static const std::vector<std::string> names = {"connect", "join", "round_closed", "failover", "workers",
                                                 "exit_barrier", "leave"};
  return names;
}

struct PhaseStats {
  double seconds = -1;      // -1: not reached.
  int ok = 0;
  int expected = 0;
  double server_cpu_s = 0;  // Server CPU time used during the phase.
  double requests = 0;      // Server RPCs completed during the phase (meshrun_rpcs_total).
  std::map<std::string, double> rpcs;  // ... by method.
  // Server store requests during the phase by node (meshrun_store_requests_total{node}).
  std::map<std::string, double> store_by_node;
  // Connections the server accepted during the phase, by its own count
  // (meshrun_connections_accepted_total).
  double accepted = 0;
  int sockets_end = -1;     // Server sockets at the end of the phase.
  int peak_fds = 0;         // Most server descriptors seen during it (sampled every 250 ms).
  int64_t rss_end_kib = 0;
};

struct RunResult {
  int n = 0;
  int run = 0;
  std::string state = "memory";  // "memory", or "etcd" (DriverOptions::etcd).
  int failover_from = -1;        // etcd: the replica that led and was killed.
  int failover_to = -1;          // ... and the one that led after it.
  int processes = 0;
  int workers_per_agent = 0;  // The workers phase's (0: not run).
  bool complete = false;
  std::string failure;  // Why not complete.
  std::map<std::string, PhaseStats> phases;
  int64_t rss_idle_kib = 0;    // Before any agent.
  int64_t rss_joined_kib = 0;  // Every agent connected and assigned, at the end of the join phase.
  int64_t rss_steady_kib = 0;  // Every agent connected and assigned, steady_wait after the round closed.
  int64_t rss_peak_kib = 0;    // VmHWM at the end.
  int64_t rss_after_kib = 0;   // After every agent left (see DriverOptions::settle).
  int sockets_idle = 0;
  int sockets_after = 0;
  int64_t heartbeats_ok = 0;
  int64_t heartbeats_failed = 0;
  int64_t streams_lost = 0;
  std::string first_heartbeat_error;
  double load_avg_1m = 0;      // /proc/loadavg at the start of the run.
  // KvSet latency after the round closed (DriverOptions::kvset_count; 0:
  // not measured), milliseconds.
  int kvset_count = 0;
  double kvset_p50_ms = 0;
  double kvset_p99_ms = 0;
  // The concurrent KvSets (DriverOptions::kvset_concurrent; 0: not measured).
  int kvset_concurrent = 0;
  double kvset_concurrent_all_ms = 0;
  double kvset_concurrent_p50_ms = 0;
  // etcd's own one-at-a-time writes on the same members, right after the
  // KvSets (etcd_write_latency.h; etcd runs with kvset_count > 0).
  int etcd_write_count = 0;
  double etcd_put_p50_ms = 0;
  double etcd_fenced_p50_ms = 0;
  double etcd_fenced_p99_ms = 0;
  // The keys written before the failover (DriverOptions::preload_keys; 0:
  // none), how long that took, and how many the next leader held after
  // the failover phase (-1: not counted).
  int64_t preload_keys = 0;
  double preload_s = 0;
  int64_t keys_after_failover = -1;
};

// Runs one measured run of `n` agents. Never throws; a failure is in the
// result. Every process it started is gone when it returns.
RunResult RunOnce(const DriverOptions& options, int n, int run_index);

// Kills (SIGKILL) the process group of every process RunOnce and RunC10d
// have running, then exits 130, on SIGINT, SIGTERM or SIGHUP. Call once,
// early in main. Without it the server dies with this process anyway
// (PR_SET_PDEATHSIG) and the load processes at their next command (EOF).
void KillChildrenOnSignal();
// Process groups KillChildrenOnSignal kills; at most 256 at a time.
// Async-signal-safe bookkeeping; thread-safe.
void TrackProcessGroup(pid_t pgid);
void UntrackProcessGroup(pid_t pgid);

// Sets the soft RLIMIT_NOFILE to the hard limit (inherited by the server and
// the load processes). Returns the new soft limit.
int64_t RaiseOpenFilesLimit();

}  // namespace meshrun::bench
