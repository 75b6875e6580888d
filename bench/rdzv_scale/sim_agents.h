// bench/rdzv_scale: one process's share of the simulated agents. Each
// simulated agent is a real client::RendezvousClient (the class meshrun's
// node agent uses, with its production connection settings) driven through
// the agent's sequence: Connect, StartWatch before the first join, a
// heartbeat every keep_alive_interval, JoinAsync, the ROUND_CLOSED event,
// ReportFinishedAsync, and leaving (the client destroyed). Nothing of the
// protocol is re-implemented here.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshrun::client {
class RendezvousClient;
}

namespace meshrun::bench {

// What a process's agents need to know; all of them share it.
struct SimConfig {
  std::string endpoint;     // "127.0.0.1:PORT": the server under test.
  std::string run_id;
  std::string token;        // MESHRUN_TOKEN of the server; "" for none.
  int first_index = 0;      // This process's agents are first_index .. first_index+count-1
  int count = 0;            // of `nnodes` in the run.
  int nnodes = 0;
  int nproc = 8;            // Workers per simulated node (the assignment's world size).
  // Simulated workers per agent in the workers phase (0: no such phase);
  // see sim_workers.h.
  int workers_per_agent = 0;
  // The agent's defaults (agent/node_agent.h, rdzv_conf).
  absl::Duration keep_alive_interval = absl::Seconds(5);
  int keep_alive_max_attempt = 3;
  absl::Duration read_timeout = absl::Seconds(60);  // Connect's timeout.
  absl::Duration join_timeout = absl::Seconds(600);
  absl::Duration exit_barrier_timeout = absl::Seconds(300);
  // Connect calls in flight at once in this process (each is blocking).
  int connect_concurrency = 32;
  // Open each agent's event stream when it connects, before the join phase
  // (the agent's order before issue 23), rather than right after its join.
  // For A/B measurements; the server then needs a max_nonmember_watchers_per_run
  // of at least the agents.
  bool watch_first = false;
  // Joins answered on the event stream, as the agent's (false: the call is
  // held open until the round closes, as before stop 29; for A/B runs).
  bool join_on_stream = true;
  // Threads that send this process's heartbeats, spread over the interval.
  int heartbeat_threads = 4;
  // How long one phase may take before it is reported as incomplete.
  absl::Duration phase_timeout = absl::Seconds(120);
};

// One phase's outcome in this process. Times are CLOCK_MONOTONIC seconds
// (std::chrono::steady_clock), comparable between processes of one machine.
struct PhaseResult {
  double start = 0;  // First request of the phase sent.
  double first = 0;  // First answer (0 when none).
  double end = 0;    // Last answer (0 when none).
  int ok = 0;
  int failed = 0;
  // Join only: the sum of the node ranks received (checked by the driver:
  // N distinct ranks of 0..N-1 sum to N(N-1)/2).
  int64_t rank_sum = 0;
  std::string error;  // The first failure, in words; "" when none.
};

// Counters over the whole life of this process's agents.
struct SimCounters {
  int64_t heartbeats_ok = 0;
  int64_t heartbeats_failed = 0;
  int64_t streams_lost = 0;  // Event streams that ended before the agent left.
  std::string first_heartbeat_error;  // The first failed heartbeat's status.
};

// Steady-clock seconds now.
double MonoNow();

// Thread-safe for the phase calls made one at a time from one thread (the
// driver's commands arrive in order); callbacks come from the clients'
// threads.
class WorkersPhase;  // sim_workers.h

class SimAgents {
 public:
  explicit SimAgents(SimConfig config);
  ~SimAgents();

  // Connects every agent (at most connect_concurrency at once): its
  // client's channel to the server.
  PhaseResult Connect();
  // Every agent joins at once and opens its event stream right after (as
  // meshrun's agent does), then the heartbeats start; ends when every
  // assignment (or failure) came.
  // Each assignment is checked: round 0, node_count = nnodes, world size =
  // nnodes x nproc, node rank in range (else counted as failed).
  PhaseResult Join();
  // Waits until every agent's stream delivered ROUND_CLOSED (they arrive
  // during Join: this only waits and reports their times).
  PhaseResult RoundClosed();
  // With the state in etcd, after the driver killed the leading replica
  // (and its etcd member) at steady time `since`: waits until every
  // assigned agent's client uses another server than `old_endpoint` (it
  // found the next leader: RendezvousClient::endpoint). first / end: the
  // first and last agent seen moved (polled every 10 ms).
  PhaseResult Failover(const std::string& old_endpoint, double since);
  // The exit barrier: every agent reports finished; ends when every barrier
  // answered all_finished (or failed).
  PhaseResult Finish();
  // Stops the heartbeats and destroys every client (closing its stream and
  // its connection); ends when all are gone.
  PhaseResult Leave();
  // After the round closed, untimed: every agent starts its store proxy
  // and its workers_per_agent workers connect to it and plan their exchange
  // (sim_workers.h WorkersPhase::Prepare). ok: workers ready.
  PhaseResult PrepareWorkers();
  // Then the workers fetch a 3-D mesh's unique ids through their proxies
  // (WorkersPhase::Run). ok / failed count workers.
  PhaseResult Workers();

  SimCounters counters() const;

 private:
  struct Agent;
  // Starts `a`'s event stream (ROUND_CLOSED times, lost streams counted).
  void OpenStream(Agent* a);
  void HeartbeatLoop(int thread_index);
  // Waits until `pred` holds or phase_timeout passes; true when it holds.
  template <typename Pred>
  bool AwaitLocked(Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SimConfig config_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::vector<std::thread> heartbeat_threads_;
  std::atomic<bool> stop_heartbeats_{false};
  std::atomic<bool> leaving_{false};

  mutable absl::Mutex mu_;
  PhaseResult phase_ ABSL_GUARDED_BY(mu_);
  int round_closed_seen_ ABSL_GUARDED_BY(mu_) = 0;
  double round_closed_first_ ABSL_GUARDED_BY(mu_) = 0;
  double round_closed_last_ ABSL_GUARDED_BY(mu_) = 0;
  SimCounters counters_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<WorkersPhase> workers_;  // Between PrepareWorkers and Workers.
};

}  // namespace meshrun::bench
