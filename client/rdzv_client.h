// The agent's side of the rendezvous protocol: join, watch, report. Converts
// between rendezvous.proto and the domain types of proto/types.h.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/channel.h"
#include "common/net.h"
#include "common/security.h"
#include "proto/types.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc
namespace meshrun::v1 {
class HeartbeatRequest;
class HeartbeatResponse;
}  // namespace meshrun::v1

namespace meshrun::client {

// How long a server may stay silent before a client counts it as lost: the
// run's own rule for a silent node (keep_alive_interval x
// keep_alive_max_attempt) or `server_silence_timeout` (rdzv_conf
// server_silence_timeout, default 8 s), whichever is shorter, but never
// less than one heartbeat interval plus kMinHeartbeatWait (a heartbeat must
// get its chance to be answered). Pure.
absl::Duration ServerSilenceLimit(absl::Duration keep_alive_interval, int keep_alive_max_attempt,
                                  absl::Duration server_silence_timeout);

class RendezvousClient {
 public:
  // The least time a heartbeat waits for its answer.
  static constexpr absl::Duration kMinHeartbeatWait = absl::Seconds(2);
  // Connects to `endpoint` ("host:port") with `auth` (its token goes in
  // every request; TLS when auth.tls.client_tls()), waiting up to
  // `connect_timeout` for its host to come up (a warning every 15 s after
  // the first 5 s says what is being waited for: read_timeout). The channel
  // dials the numeric address that accepted a TCP connection, so that
  // dialed_addr() is an address this node really reached the server on
  // (client/channel.h, Dial). UNAVAILABLE naming the endpoint, the
  // addresses tried and their errors when it is unreachable by then, or at
  // the first failed handshake naming a TLS mismatch; INVALID_ARGUMENT for
  // a malformed endpoint; what `interrupted` returns when it ends the wait
  // (checked at least every 100 ms; a stop signal).
  //
  // Replicas (docs/design.md section 4d): `endpoint` may list several
  // replicas of one replicated server, "h1:p,h2:p,h3:p". The client then
  // connects to the one that leads (a standby's refusal names it:
  // common/standby.h) and follows the next leader after a failover (see
  // StartWatch); a standby is never taken for a lost server. UNAVAILABLE
  // naming every replica and why when none leads within connect_timeout.
  static absl::StatusOr<std::unique_ptr<RendezvousClient>> Connect(
      const std::string& endpoint, const std::string& run_id, const ClientAuth& auth, absl::Duration connect_timeout,
      std::function<absl::Status()> interrupted = nullptr);
  // With several replicas: how long the client looks for a new leader
  // after losing the one it used, before its event stream ends with the
  // loss (default 60 s). Call before StartWatch.
  void set_failover_timeout(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    failover_timeout_ = d;
  }
  // With several replicas: called with the new leader's channel after each
  // failover, on the watch's thread (the store proxy follows it).
  void set_on_leader_change(std::function<void(std::shared_ptr<grpc::Channel>)> fn) {
    absl::MutexLock lock(&mu_);
    on_leader_change_ = std::move(fn);
  }
  // rdzv_conf server_silence_timeout (see ServerSilenceLimit); call before
  // the first JoinAsync. Default 8 s.
  void set_server_silence_timeout(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    server_silence_timeout_ = d;
  }
  ~RendezvousClient();

  // Joins the run's open round; `done` runs on a gRPC thread with the
  // assignment, DEADLINE_EXCEEDED after `timeout`, or the server's refusal.
  // (`done` runs on a thread of the client's, not on the caller's.)
  // One join at a time. Thread-safe.
  //
  // With set_join_on_stream(true), the join is answered on this client's
  // event stream: the server is asked to answer the call at once
  // (JoinRequest.answer_on_stream) and the result comes as the stream's
  // JOIN_ANSWERED event, so no call is held open while the round forms
  // (with 10,000 nodes those open calls cost the server memory and CPU;
  // torchrun's c10d rendezvous polls its store instead). Should the stream
  // end or move to another replica before the answer, the join is sent
  // again; what the stream ended with (its refusal, or UNAVAILABLE) when it
  // ended for good. A server that does
  // not answer on streams holds the call until the round closes, as
  // without the setting.
  void JoinAsync(const rendezvous::NodeDesc& node, const rendezvous::RunConfig& config,
                 int64_t last_round, absl::Duration timeout,
                 std::function<void(absl::StatusOr<rendezvous::Assignment>)> done);
  // Joins are answered on the event stream (see JoinAsync): the caller
  // starts it (StartWatch) right after its first JoinAsync, or before.
  // Call before the first JoinAsync. Default false.
  void set_join_on_stream(bool on) {
    absl::MutexLock lock(&mu_);
    join_on_stream_ = on;
  }
  // Cancels a join in flight (its `done` then gets CANCELLED).
  void CancelJoin();

  // Starts streaming the run's events for `node_id` on a thread of its own:
  // on_event for each, then on_closed once with the final status (OK only
  // after StopWatch). Call once. With several replicas, a stream that
  // breaks (UNAVAILABLE: the leader's process, host or etcd lease gone), a
  // server silent past ServerSilenceLimit, or a heartbeat refused by a
  // standby starts a failover instead: the client looks for the leader
  // (every replica in turn, the one a standby names first) for up to the
  // failover timeout, moves every later call to it, re-opens the stream
  // from the round known so far with this node's credential, and logs
  // "following the rendezvous leader at H:P (failover N ms)". on_closed
  // follows only when none leads by then.
  void StartWatch(const std::string& node_id, int64_t known_round,
                  std::function<void(const rendezvous::RunEvent&)> on_event,
                  std::function<void(const absl::Status&)> on_closed);
  // Ends the stream StartWatch opened (its on_closed gets OK) and waits for
  // its thread; a no-op when none is open. Thread-safe; not from on_event.
  void StopWatch();

  // Cancels every call in flight (the join, heartbeats, the exit barrier)
  // and ends the event stream (StopWatch); a heartbeat asked for afterwards
  // ends CANCELLED at once. Thread-safe; not from on_event. The destructor
  // calls it.
  void Stop();

  // Records this node's heartbeat; returns the run's current round, or
  // FAILED_PRECONDITION when the node was declared lost (stale). Blocking,
  // for at most `timeout`; ended by Stop. Heartbeats also watch the server: once the run's
  // config is known (the first JoinAsync), a server that answered nothing
  // (no heartbeat, not even with a refusal, and no event on the stream) for
  // ServerSilenceLimit is lost: each heartbeat waits no longer than that
  // limit allows, and when one ends unanswered past it, the event stream
  // ends with UNAVAILABLE "lost the rendezvous server at ENDPOINT: no answer
  // for 8.0s (1 heartbeat unanswered; limit 8s; ...)", the time measured
  // then. With the defaults (heartbeats every 5 s) a frozen server is
  // noticed within 8 s. torchrun has no such check: its agent notices at
  // its next store call.
  absl::StatusOr<int64_t> Heartbeat(const std::string& node_id, int64_t round, absl::Duration timeout);

  // Which replica group `node_id` joins (meshrun --replica_groups): asks
  // the server (rendezvous/run/replica_group_placer.h) for a group of this
  // client's run id, of `replica_groups` groups of MIN..MAX nodes each.
  // Returns the group's index and run id, or -1 and "" when every group is
  // full (a standby: ask again). Blocking, bounded by `timeout`; the
  // server's refusal as it came (FAILED_PRECONDITION: every group ended).
  // Call before the membership starts (before UseRunId).
  absl::StatusOr<std::pair<int, std::string>> PlaceReplicaGroup(const std::string& node_id, int replica_groups,
                                                                int min_nodes_per_group,
                                                                int max_nodes_per_group, absl::Duration timeout);
  // How each of the `replica_groups` groups of the job `job_run_id` stands
  // (ReplicaGroupPlacer::States), group 0 first. Blocking, bounded by
  // `timeout`; the server's refusal as it came. Thread-safe (with the
  // membership's calls).
  absl::StatusOr<std::vector<rendezvous::ReplicaGroupState>> ReplicaGroupStates(const std::string& job_run_id,
                                                                                int replica_groups,
                                                                                absl::Duration timeout);
  // From now on this client's calls name `run_id` (the replica group's run
  // that PlaceReplicaGroup gave). Not thread-safe: call it before any other
  // call of the membership (Join, Heartbeat, Watch).
  void UseRunId(std::string run_id) { run_id_ = std::move(run_id); }
  const std::string& run_id() const { return run_id_; }

  // Reports a worker failure; the verdict says restart or stop. Blocking,
  // bounded by `timeout`; with replicas, a call that found the leader gone
  // (UNAVAILABLE, or a standby's refusal) is made again to the next leader the watch finds, within
  // the failover timeout (set_failover_timeout).
  absl::StatusOr<rendezvous::FailureVerdict> ReportFailure(const rendezvous::WorkerFailure& failure,
                                                           absl::Duration timeout);

  // The exit barrier; `done` runs on a gRPC thread. The RPC deadline is
  // `timeout` plus a few seconds. With several replicas, a leader lost
  // while this node waits (UNAVAILABLE, or a standby's refusal) is not the
  // barrier's end: once the watch follows
  // the next leader (StartWatch), the finish is reported there again
  // (arrivals are durable), within the same deadline.
  void ReportFinishedAsync(const std::string& node_id, int64_t round, absl::Duration timeout,
                           std::function<void(absl::StatusOr<rendezvous::BarrierResult>)> done);

  // HTTP/2 keepalive of the connection: a ping after this long without
  // traffic, and the connection is dropped when its answer takes longer
  // than kKeepaliveTimeout. The backstop for a client that sends no
  // heartbeats (see Heartbeat); both far above what a busy server needs to
  // answer.
  static constexpr absl::Duration kKeepaliveTime = absl::Seconds(30);
  static constexpr absl::Duration kKeepaliveTimeout = absl::Seconds(20);

  // The server (the leader among replicas) used now. Thread-safe.
  std::string endpoint() const {
    absl::MutexLock lock(&mu_);
    return endpoint_;
  }
  // The connection to the server, for the node's store proxy to forward
  // its workers' store requests over (agent/store_proxy/store_proxy.h): shared, so it
  // lives as long as either holds it. Thread-safe.
  // True when given several replicas' endpoints (it follows their leader).
  bool replicated() const { return endpoints_.size() > 1; }
  std::shared_ptr<grpc::Channel> channel() const {
    absl::MutexLock lock(&mu_);
    return channel_;
  }
  // This node's current session credential (docs/design.md section 4c): handed
  // out by the server in the event stream's first event, then renewed with
  // every assignment; sent with every request that speaks for the node.
  std::string session() const;
  // The numeric server address this client dialed, and the local (source)
  // address of that connection.
  const std::string& dialed_addr() const { return route_.remote; }
  const std::string& local_addr() const { return route_.local; }

 private:
  RendezvousClient(std::string run_id, std::string token, Connection connection);
  struct Stubs;
  // The stub of the server used now.
  std::shared_ptr<Stubs> stubs() const;
  // After a call failed with `s` on the server `on`: true once the client
  // follows another leader (FailOver, driven by the event stream), so the
  // call can be sent there; false when `s` is no failover (one endpoint, or
  // not UNAVAILABLE nor a standby's refusal, nor CANCELLED where
  // `cancelled_is_lost`), when stopping, or at `deadline`. A standby's
  // refusal starts the failover. `cancelled_is_lost`: for calls this client
  // cancels only when stopping (the reports), CANCELLED comes from a server
  // shutting down (gRPC cancels the calls it still holds), so it is a lost
  // server too; a join, which CancelJoin cancels, passes false.
  bool WaitForNextLeader(const grpc::Status& s, const std::shared_ptr<Stubs>& on, absl::Time deadline,
                         bool cancelled_is_lost = false);
  // The server in use refused as a standby naming `leader`, or another
  // replica leads while it is silent (`why`; empty: the standby's refusal):
  // asks the event stream to fail over, to that leader first (once; not
  // when stopping).
  void RequestFailover(const std::string& leader, const std::string& why = "");
  // Replicas: another endpoint than `current` that serves (leads) now, or
  // "" (each asked in turn with `node_id`'s heartbeat: a dial and a
  // question, 1 s each at most; at most one such search per
  // kOtherLeaderPause, else "" at once). Only a replica holding the etcd
  // lease serves, so one that serves while `current` is silent is the next
  // leader: `current` was cut off (docs/etcd.md).
  std::string OtherLeader(const std::string& current, const std::string& node_id);
  // Replicas: a heartbeat on the server used now. A leader silent for
  // kMinHeartbeatWait may have been cut off (its host's link down, its
  // processes alive: no connection is refused) while another leads
  // already: the others are asked then (OtherLeader); when one serves, the
  // heartbeat ends (counted as unanswered) and the event stream follows it
  // (RequestFailover), rather than waiting out the silence limit.
  grpc::Status HeartbeatAmongReplicas(grpc::ClientContext* ctx, const ::meshrun::v1::HeartbeatRequest& req,
                                      ::meshrun::v1::HeartbeatResponse* resp);
  static constexpr absl::Duration kOtherLeaderPause = absl::Seconds(5);
  // Looks for the leader among endpoints_ until `deadline` (or a stop);
  // switches every later call to it. OK once switched.
  absl::Status FailOver(const std::string& why, absl::Time deadline);
  // Waits up to `d` (for the join to be taken, with `until_join_taken`);
  // false at once when the client stops (StopWatch).
  bool PauseUnlessStopping(absl::Duration d, bool until_join_taken);
  // Runs a blocking call on a thread of its own, joined at destruction.
  void StartCall(std::function<void()> call);
  // Counts a heartbeat's outcome; ends the event stream when the server has
  // been silent past the run's keep-alive limit (see Heartbeat).
  void NoteHeartbeat(const grpc::Status& s);
  // Any answer of the server (an event on the stream) shows it is there.
  void NoteAnswer();

  std::string run_id_;  // Set once by UseRunId, before the membership's calls.
  const std::string token_;
  const TcpRoute route_;
  // Replicas: every endpoint given (one for a single server), and how to dial them.
  std::vector<std::string> endpoints_;
  TlsMaterial tls_;
  // The name TLS checks the replicas' certificates against when they were
  // found as one name's addresses (empty: each endpoint's own host).
  std::string tls_name_;
  std::string watch_node_id_;  // StartWatch's node, set before its thread starts.

  mutable absl::Mutex mu_;
  std::string endpoint_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::Channel> channel_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Stubs> stubs_ ABSL_GUARDED_BY(mu_);
  absl::Duration failover_timeout_ ABSL_GUARDED_BY(mu_) = absl::Seconds(60);
  std::function<void(std::shared_ptr<grpc::Channel>)> on_leader_change_ ABSL_GUARDED_BY(mu_);
  // A heartbeat was refused by a standby: the watch fails over (to `failover_hint_` first).
  bool failover_wanted_ ABSL_GUARDED_BY(mu_) = false;
  std::string failover_hint_ ABSL_GUARDED_BY(mu_);
  std::string failover_why_ ABSL_GUARDED_BY(mu_);
  absl::Time last_other_leader_search_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string session_ ABSL_GUARDED_BY(mu_);
  int64_t known_round_ ABSL_GUARDED_BY(mu_) = -1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The event stream was started for a node without a credential and has
  // not delivered it yet: a join waits for it.
  bool watch_opening_ ABSL_GUARDED_BY(mu_) = false;
  // A join was answered with an assignment: later joins carry its
  // credential; a first join carries none (the server matches it with this
  // connection's event stream).
  bool has_assignment_ ABSL_GUARDED_BY(mu_) = false;
  // The server took a join of this node (to answer on the stream, or
  // answered it): it counts the node's streams as a member's from then on.
  bool join_taken_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<grpc::ClientContext> join_ctx_ ABSL_GUARDED_BY(mu_);
  // Joins answered on the event stream (JoinAsync): asked for; the stream
  // ended for good, and how many times it ended (each end withdraws a join
  // waiting on it); the answer of the join in flight; CancelJoin was called.
  bool join_on_stream_ ABSL_GUARDED_BY(mu_) = false;
  bool watch_ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status watch_end_ ABSL_GUARDED_BY(mu_);  // What the stream ended with (on_closed's status).
  int64_t watch_ends_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::StatusOr<rendezvous::Assignment>> stream_answer_ ABSL_GUARDED_BY(mu_);
  bool join_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<grpc::ClientContext> watch_ctx_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::ClientContext> finish_ctx_ ABSL_GUARDED_BY(mu_);
  // Heartbeats in flight (their callers' contexts), for Stop to cancel.
  absl::flat_hash_set<grpc::ClientContext*> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> calls_ ABSL_GUARDED_BY(mu_);
  // Server liveness, from the heartbeats: the run's keep-alive limit (zero
  // until the first JoinAsync), the last answer, the misses since, and why
  // the server counts as lost ("" while it does not).
  absl::Duration silence_limit_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Duration server_silence_timeout_ ABSL_GUARDED_BY(mu_) = absl::Seconds(8);
  absl::Time last_answer_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int missed_heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  std::string server_lost_ ABSL_GUARDED_BY(mu_);
  std::thread watch_thread_;
};

}  // namespace meshrun::client
