// The rendezvous protocol's domain types, shared by the server (rendezvous/)
// and the node agent (agent/). No gRPC or Protobuf here: proto/wire.cc
// translates them to and from the wire.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace meshrun::rendezvous {

// The request metadata key with which a node's store proxy names its node
// (the node id) on every store request it forwards (rendezvous.proto).
inline constexpr char kNodeMetadataKey[] = "meshrun-node";

// What an agent says about its node (see NodeInfo in rendezvous.proto).
struct NodeDesc {
  std::string node_id;
  std::string hostname;
  // Numeric. Before the round closes: the explicit --local_addr (resolved)
  // or the source address the server saw; after DecideAddresses: the
  // node's advertised address (MASTER_ADDR when this node is rank 0).
  std::string addr;
  int64_t pid = 0;
  int nproc = 1;
  int node_rank_hint = -1;   // --node_rank, -1 when not given.
  bool is_endpoint_host = false;
  int master_port = 0;
  std::string role = "default";
  std::string local_addr;    // --local_addr as given; empty when not given.
  std::string dialed_addr;   // Numeric server address this node connected to.
};

// The job's shape; the first join fixes it for the run.
struct RunConfig {
  int min_nodes = 1;
  int max_nodes = 1;
  absl::Duration last_call_timeout = absl::Seconds(30);
  int max_restarts = 0;
  absl::Duration exit_barrier_timeout = absl::Seconds(300);
  absl::Duration keep_alive_interval = absl::Seconds(5);
  int keep_alive_max_attempt = 3;
};

// One node's place in a closed round.
struct Assignment {
  int64_t round = 0;
  int node_rank = 0;
  int node_count = 0;
  int rank_base = 0;
  int world_size = 0;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
  int role_rank_base = 0;
  int role_world_size = 0;
  std::string node_addr;  // This node's advertised address (MESHRUN_NODE_ADDR).
  std::string session;    // This node's credential for this round (secret).
};

struct WorkerFailure {
  std::string node_id;
  std::string hostname;
  int node_rank = -1;
  int rank = -1;
  int local_rank = -1;
  int exit_code = 0;
  int signal = 0;
  std::string message;
  int64_t round = 0;
  absl::Time time;  // Server clock when accepted.
  // Not worth a restart (the worker said so): as the root cause it fails
  // the run at once, restarts left or not.
  bool permanent = false;
};

struct RunEvent {
  enum class Kind { kRoundClosed, kRestart, kNodeLost, kNodeWaiting, kRunFinished, kRunFailed, kJoinProgress, kSession,
                    kJoinAnswered };
  Kind kind = Kind::kRoundClosed;
  int64_t round = 0;
  std::string node_id;
  std::optional<WorkerFailure> root_cause;
  int restart_count = 0;
  bool membership_change = false;  // kRestart after a node was lost or added.
  int joined = 0;     // kJoinProgress: nodes joined so far.
  int min_nodes = 0;
  int max_nodes = 0;
  std::string session;  // kSession: the new node's credential (secret).
  // kJoinAnswered: the node's join result, its assignment or why it was refused.
  std::optional<Assignment> assignment;
  absl::Status refusal;
};

enum class Decision { kRestart, kStop };

struct FailureVerdict {
  Decision decision = Decision::kStop;
  int64_t next_round = 0;
  WorkerFailure root_cause;
  bool is_root_cause = false;
};

struct BarrierResult {
  bool all_finished = false;
  int finished_nodes = 0;
  int node_count = 0;
};

// How one replica group of a job stands (meshrun --replica_groups): its
// run's state, as the agents judge the job by (ReplicaGroupStates).
struct ReplicaGroupState {
  // kNone: the server holds no run for the group (no node joined it yet,
  // or its run went after all its nodes left).
  enum class State { kNone, kJoining, kRunning, kFinished, kFailed };
  State state = State::kNone;
  // A node takes part in its run: a member, a member being re-formed or a
  // node whose join waits.
  bool has_nodes = false;
  int restart_count = 0;
  // kFailed: why (the root cause, one line); else empty.
  std::string failure;
  // Its run finished or failed.
  bool ended() const { return state == State::kFinished || state == State::kFailed; }
};

// One node as the server sees it, for `meshrun status`.
struct NodeStatus {
  std::string node_id;
  std::string hostname;
  std::string addr;
  int node_rank = -1;   // -1 while it waits or stands by.
  int nproc = 0;
  // "running", "finished" (at the exit barrier), "joining" (a member of the
  // round being formed), "waiting" (wants the next round) or "standing by"
  // (at MAX, taken in when a node is lost).
  std::string state;
  // Time since its last keep-alive (or join); negative when never seen.
  absl::Duration keepalive_age = absl::Seconds(-1);
};

// One entry of a run's timeline (rendezvous/run/run_timeline.h): what
// happened to the run and when, for `meshrun status --events`.
struct TimelineEvent {
  absl::Time time;   // Server clock.
  std::string kind;  // "round", "restart", "re-form", "node lost", "failover", "reload", "finished", "failed".
  std::string detail;  // One line.
};

struct RunStatus {
  std::string run_id;
  int64_t round = 0;
  std::string state;
  int nodes = 0;
  int world_size = 0;
  int restart_count = 0;
  int64_t kv_keys = 0;
  int max_restarts = 0;
  int min_nodes = 0;
  int max_nodes = 0;
  // Members of the current round (by node rank), then joiners in join order.
  std::vector<NodeStatus> node_list;
  int lost_nodes = 0;  // Nodes declared lost in this run so far.
  int64_t kv_bytes = 0;  // Bytes of keys and values in its store.
  int64_t kv_waiters = 0;  // Store reads parked now, waiting for their keys.
  // When the run was made (kept across failovers); InfinitePast when unknown.
  absl::Time created = absl::InfinitePast();
  // The root cause of its last incident (a worker failure or a lost node).
  std::optional<WorkerFailure> root_cause;
  // Its timeline, oldest first; filled only when asked for (Status with
  // events), and `timeline_dropped` older entries no longer kept.
  std::vector<TimelineEvent> timeline;
  int64_t timeline_dropped = 0;
};

// Receives a run's events, in order. Implementations must not block and must
// not call back into the Run from Push (it is called under the run's lock).
class EventSink {
 public:
  virtual ~EventSink() = default;
  // Queues one event for the node's stream, in order (a stream too far
  // behind is closed by the implementation, not refused here).
  virtual void Push(const RunEvent& event) = 0;
  // Ends the stream: the node was declared lost and is now stale.
  virtual void CloseStale(const std::string& why) = 0;
  // Ends the stream because the run was closed: the server is shutting
  // down, or the run id was taken by a new job. `why` says which; the agent
  // reports it as the reason it lost the server.
  virtual void CloseRun(const std::string& why) = 0;
  // Ends the stream to make room for others (RESOURCE_EXHAUSTED, `why`
  // naming the limit): a non-member's stream, the oldest, when a run's
  // non-member streams are full. The client may open it again.
  virtual void CloseEvicted(const std::string& why) { CloseRun(why); }
  // The stream's node joined: from now on it is a member's stream (served
  // from the memory budget's member reserve).
  virtual void PromoteToMember() {}
};

}  // namespace meshrun::rendezvous
