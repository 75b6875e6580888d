// One agent's run of the job (NodeAgent::Run, node_agent.h), split by
// responsibility over these files (agent internal):
//   node_agent.cc      Run: set-up, the job, clean-up
//   session_join.cc    the rendezvous: membership, event stream, heartbeats,
//                      joining rounds (and the stale-node rejoin)
//   session_workers.cc spawning and supervising this node's workers, failures
//   session_finish.cc  the end of the job: exit barrier, failure summary,
//                      what the workers left behind
//   session_job.cc     a job of replica groups: --min_replica_groups and the
//                      exit barrier across the groups
//   session_logs.cc    the run's log folder and where each worker's output goes
// Everything runs on the agent's one thread (the caller of Run), fed by the
// event queue (events.h); not thread-safe otherwise.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "agent/events.h"
#include "agent/node_agent.h"
#include "agent/output.h"
#include "agent/process.h"
#include "client/rdzv_client.h"
#include "agent/lighthouse/lighthouse_proxy.h"
#include "agent/store_proxy/store_proxy.h"
#include "agent/tcpstore/tcpstore_server.h"
#include "agent/worker_stop.h"
#include "common/logging.h"
#include "common/stale.h"
#include "proto/types.h"

namespace meshrun::agent {

// A status that says this node was declared lost (a stale member): by its
// mark (common/stale.h), not its words.
inline bool IsStale(const absl::Status& s) { return IsStaleStatus(s); }

class Session {
 public:
  using Assignment = rendezvous::Assignment;
  using RunEvent = rendezvous::RunEvent;
  using WorkerFailure = rendezvous::WorkerFailure;

  // `o` is copied: with --replica_groups the placement changes its run id.
  explicit Session(const AgentOptions& o) : o_(o), log_(Logger("agent")) {}
  // The agent store's connections close before the store proxy goes (its
  // WAITs then end quietly).
  ~Session() {
    if (agent_store_) agent_store_->Stop();
  }

  // The whole job (NodeAgent::Run's contract).
  int Run();
  int received_signal() const { return received_signal_; }

 private:
  // ---- node_agent.cc
  // Prints "meshrun: error: <msg>" and returns 1.
  int Fatal(const std::string& msg);
  // NewMembership failed with `s`: 128+n when a stop signal n ended its wait
  // for the server (said in one line), else Fatal.
  int MembershipFailed(const absl::Status& s);

  // ---- session_logs.cc
  // The run's log folder: --log_dir/<run id>_<start time>_<pid> (the pid
  // keeps nodes sharing one folder, or one host, apart), else a temporary
  // folder that holds the error files (and redirected streams).
  absl::Status PrepareLogDir();
  // Where worker `lr` (global rank `rank`) writes, for this attempt.
  WorkerRoutes Routes(int lr, int rank, const std::filesystem::path& attempt) const;
  // Removes the temporary log folder after a successful job; after a
  // failed one keeps only what holds a file (the error files).
  void CleanLogDir(int code);

  // ---- session_join.cc
  // Connects as a new member (a fresh node id), opens the event stream
  // before the first join (so join progress, a failure elsewhere and the
  // loss of the server reach this node at once) and starts heartbeats. The
  // store proxy is started with the first membership and follows the
  // agent's connection to later ones.
  absl::Status NewMembership();
  // With --replica_groups: asks the server for this node's group (standing
  // by while every group is full, within join_timeout) and makes the
  // group's run this agent's run id (client_ included); the job's run id
  // stays the lighthouse's run. Cancelled by a stop signal.
  absl::Status PlaceInReplicaGroup();
  // The run whose lighthouse (and shared store) the workers use: rdzv_conf
  // lighthouse_run, the job's run id with --replica_groups (once placed),
  // else the node's run; empty with rdzv_conf lighthouse=0.
  std::string LighthouseRunId() const {
    if (!o_.lighthouse.enabled) return "";
    return o_.lighthouse.run_id.empty() ? o_.run_id : o_.lighthouse.run_id;
  }
  // Stops the heartbeats and the event stream.
  void EndMembership();
  // The whole job: join, run, and on failure restart through the server.
  int Loop();
  // Handles a sign that this node is stale; true when it was one (of the
  // current membership).
  bool OnStale(const std::string& why);
  // Joins the next round; false with `*exit_code` set when the agent must stop.
  bool Join(int64_t last_round, Assignment* out, std::optional<int>* exit_code);
  // The event stream of a new membership is opened by its first Join.
  bool watch_pending_ = false;
  // "N" or "MIN:MAX", as --nnodes.
  std::string NnodesText() const;
  // For a server that refused this node's token while another meshrun of
  // this host holds the endpoint's port (o_.endpoint_note): names that
  // meshrun and its run, and says what to do. "" otherwise.
  std::string RefusalHint(const absl::Status& s) const;
  // The progress line's count: "1/2 nodes", or "1 node (of --nnodes=1:2)".
  std::string JoinedText(int joined) const;
  // The next event: those held back while workers stopped first.
  std::optional<Event> NextEvent(absl::Time deadline);

  // ---- session_workers.cc
  // Spawns this node's workers for round `a` and supervises them. Returns the
  // exit code when the agent is done, nullopt to join the next round.
  std::optional<int> RunRound(const Assignment& a);
  // The worker's command line, behind the shim when it is installed next
  // to meshrun (it keeps a SIGKILLed agent from leaving grandchildren).
  std::vector<std::string> WorkerArgv(int local_rank) const;
  int Running() const;
  Worker* FindWorker(pid_t pid);
  // Waits on the workers and the server's events until the round ends.
  std::optional<int> Supervise();
  // Reports a failed worker; nullopt to restart (join the next round).
  std::optional<int> OnWorkerFailure(const Worker& w);
  // Reports `f` (this node's), stops the workers, and returns the failure
  // summary's exit code, or nullopt when the server's verdict is a restart.
  std::optional<int> ReportAndStop(WorkerFailure f);
  // See agent/worker_stop.h: the signal to each main process, the grace,
  // then everything left below this agent. `by_signal`: meshrun itself
  // received `signo`. Returns a stop signal that arrived meanwhile and was
  // kept for later (0: none).
  int StopWorkers(int signo, absl::Duration grace, bool by_signal = false);
  // Marks the workers still running as stopped by meshrun (the summary).
  void MarkStopped();

  // ---- session_job.cc: a job of replica groups (--replica_groups)
  // Fewer groups than --min_replica_groups are alive (`e`): reports it as
  // this node's permanent failure (no worker's: rank -1), so that its
  // group's run fails and the group's other nodes stop too; returns the
  // failure summary's exit code (nullopt: another failure of the round
  // came first and restarts the group; the next heartbeat tells again).
  std::optional<int> FailBelowMinReplicaGroups(const ReplicaGroupsBelowMin& e);
  // After this node's group ended with `code` (its run finished or failed):
  // waits until no group of the job is in progress (the exit barrier
  // across the groups: agent/replica_group_job.h), asking the server every
  // keep_alive_interval, and returns the job's result: 0 when at least
  // --min_replica_groups groups finished, else `code` (1 when it is 0).
  // Returns `code` at once when the group's run has not ended (this node
  // stopped for a reason of its own) or the server cannot say; a stop
  // signal ends the wait (128+n); so does the server unreachable for
  // exit_barrier_timeout in a row (`code`).
  int AwaitReplicaGroups(int code);
  // A standby refused because every group of the job ended (`refusal`):
  // the job's result as above, said in one line; nullopt when the refusal
  // is another one.
  std::optional<int> StandbyAtJobEnd(const absl::Status& refusal);

  // ---- session_finish.cc
  // Prints the failure summary (failure_summary.h) and returns the root
  // cause's exit code (1 when unknown).
  int Summary(const std::optional<WorkerFailure>& root);
  // The job is over: what the workers left behind (reparented to this
  // agent, a subreaper) is stopped, unless --keep_orphans.
  void EndOfJob();
  // All of this node's workers exited 0: the exit barrier.
  std::optional<int> Finish();

  // The options; with --replica_groups, run_id becomes the group's run id
  // once placed (PlaceInReplicaGroup), before any other use of it.
  AgentOptions o_;
  int replica_group_ = -1;  // With --replica_groups: this node's group once placed.
  std::string job_run_id_;  // With --replica_groups: the job's run id (set before the heartbeats start).
  std::shared_ptr<spdlog::logger> log_;
  EventQueue q_;
  std::deque<Event> deferred_;
  std::unique_ptr<SignalThread> signals_;
  std::unique_ptr<client::RendezvousClient> client_;  // Declared before the heartbeat thread that uses it.
  // torchrun's agent store (agent/tcpstore/tcpstore_server.h) on this node's
  // MASTER_PORT candidate; backed by proxy_. Declared before proxy_, so that
  // proxy_ goes first and cancels the waits this store has in it.
  std::shared_ptr<tcpstore::AgentStore> agent_store_;
  // The workers' store (agent/store_proxy/store_proxy.h): forwards over client_'s channel.
  std::unique_ptr<StoreProxy> proxy_;
  // torchft's lighthouse for the workers (agent/lighthouse/lighthouse_proxy.h):
  // forwards over client_'s channel; null with rdzv_conf lighthouse=0.
  std::unique_ptr<LighthouseProxy> lighthouse_;
  rendezvous::NodeDesc node_;
  rendezvous::RunConfig config_;
  Assignment round_;
  std::vector<Worker> workers_;
  int joined_seen_ = 0;
  // The most nodes seen joined in this join: what a timeout reports, so
  // that nodes timing out one after the other report the same count.
  int joined_peak_ = 0;
  std::string endpoint_;
  std::string shim_;
  int gen_ = 0;            // Membership generation (new node id after a stale rejoin).
  bool stale_ = false;
  std::atomic<int64_t> hb_round_{-1};
  std::shared_ptr<absl::Notification> hb_stop_;
  std::thread hb_thread_;
  int received_signal_ = 0;
  // The last signal that stops the job (not a pass-through one), set by the
  // signal thread as it arrives: ends a wait for the server at once.
  std::atomic<int> stop_signal_{0};
  std::filesystem::path run_dir_;
  bool temp_run_dir_ = true;
  bool keep_run_dir_ = false;
  std::vector<int> redirects_, tee_;
  std::vector<bool> console_ranks_;
  OutputPump pump_;
  std::string failed_error_file_;
};

}  // namespace meshrun::agent
