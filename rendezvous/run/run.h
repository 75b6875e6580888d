// One run (one rdzv_id): its rounds, membership, restart budget, exit
// barrier, event watchers and key-value store. Pure domain: no gRPC.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/types.h"
#include "rendezvous/policy/limits.h"
#include "rendezvous/policy/memory_budget.h"
#include "rendezvous/run/deferred_calls.h"
#include "rendezvous/run/event_outbox.h"
#include "rendezvous/run/event_streams.h"
#include "rendezvous/run/exit_barrier.h"
#include "rendezvous/run/membership.h"
#include "rendezvous/run/node_list.h"
#include "rendezvous/run/restart_policy.h"
#include "rendezvous/run/run_summary.h"
#include "rendezvous/run/run_timeline.h"
#include "rendezvous/policy/timer.h"
#include "rendezvous/run/journal.h"
#include "rendezvous/run/serving.h"
#include "rendezvous/store/kv_store.h"

namespace meshrun::rendezvous {

class Run : public std::enable_shared_from_this<Run> {
 public:
  enum class State { kJoining, kRunning, kFinished, kFailed };
  using JoinCallback = absl::AnyInvocable<void(absl::StatusOr<Assignment>)>;
  using BarrierCallback = ExitBarrierWaiters::Callback;

  // `timer` must outlive the run. `limits` bound its store and watchers;
  // `server_bytes` counts every store's bytes of the server (see KvStore).
  // `budget`, when given (it must outlive the run), is charged every node
  // the run knows (kNodeCost) and, through its store, every key and parked
  // read; `run_charge` is the run's own charge (kRun), given back when the
  // run goes.
  Run(std::string run_id, DeadlineTimer* timer, const ServerLimits& limits = ServerLimits(),
      std::shared_ptr<std::atomic<int64_t>> server_bytes = nullptr, MemoryBudget* budget = nullptr,
      HeldCharge run_charge = HeldCharge());
  ~Run();

  // An ended run whose event streams have all closed keeps only a summary
  // (KeepOnlyStatusLocked, below); Join, Heartbeat, Watch, ReportFailure and
  // ReportFinished then answer from how it ended, with no credential to
  // check: FAILED_PRECONDITION ("has already failed/finished") for a join or
  // for a finish report in a failed run, all finished for a finish report of
  // its last round in a finished run, the run's verdict for a failure
  // report, its last event for a stream, its round for a heartbeat.
  //
  // Joins the open round. `done` is answered once, when the round closes (the
  // assignment), on a conflict (FAILED_PRECONDITION naming the field and both
  // values), or with CANCELLED after CancelJoin. A node joining while a round
  // runs waits for the next round (NODE_WAITING is pushed). `last_round` is
  // the round the node last ran in, -1 on its first join; a node that still
  // claims the running round is refused as stale. Thread-safe.
  //
  // Membership is authenticated (docs/design.md section 4c): every node the run
  // knows has a secret session credential, handed out by the server (in its
  // stream's SESSION event, then per round in its Assignment). A node the
  // run does not know yet may join with an empty `session` (it becomes
  // known); a known node must give its current credential, else
  // PERMISSION_DENIED and nothing changes (in a run that is over and kept as
  // a summary, no credential is checked: see above).
  //
  // `peer` is the client's connection (gRPC's peer string; empty: none).
  // A node's agent joins first and then opens its event stream, over one
  // connection, and the two may reach the server in either order: a join
  // with no credential of a node that only its own stream made known, from
  // the stream's connection, takes that credential; a stream with no
  // credential of a node that joined (its join in progress, or answered),
  // from the join's connection, is given its current one (kSession), and is
  // a member's stream; so is a re-opened stream of a node that only this
  // connection's earlier stream made known.
  //
  // Answered on the node's stream (a non-null `on_stream`, for JoinRequest's
  // answer_on_stream): when the join is taken and the node has an open event
  // stream, its result (the assignment, or why the round refused it) is
  // pushed to that stream alone as one kJoinAnswered event, then handed to
  // `on_stream` (for counting); `done` is never called, and Join returns
  // true: the caller answers the call at once. No
  // gRPC call is held open per joining node then (with 10,000 nodes, the
  // open calls cost the server memory and CPU: docs/performance.md). Should
  // the stream end first, the join is withdrawn as a cancelled one is.
  // Returns false when `done` answers (a refusal, at once; or the round's
  // close, with no stream to answer on).
  bool Join(const NodeDesc& node, const RunConfig& config, int64_t last_round, const std::string& session,
            JoinCallback done,
            const std::string& peer = "", JoinCallback on_stream = nullptr);
  // Withdraws `node_id`'s pending join (its Join call was cancelled: the
  // client gave up or its connection closed) and answers it CANCELLED. A
  // member of the round being re-formed goes back to the members not
  // re-joined yet: the re-form still counts it, and it is named lost when its
  // event stream ends (Unwatch). No-op when the node has no pending join.
  // Thread-safe.
  void CancelJoin(const std::string& node_id);

  // Records a heartbeat; returns the current round. PERMISSION_DENIED for
  // an unknown node or a wrong credential (not in a summary-only run: see
  // above); FAILED_PRECONDITION ("stale")
  // for a node that was declared lost. A participant's credential of the
  // round before is accepted too, until 2 keep-alive intervals after the
  // round closed (then only the current one; never after the run ended):
  // heartbeats sent while the node's Join was being answered with its new
  // credential are in flight with the old one (45-240 of 10,000 agents'
  // were refused at each round close). Only heartbeats: every other request
  // needs the current credential. Thread-safe.
  absl::StatusOr<int64_t> Heartbeat(const std::string& node_id, const std::string& session);

  // Subscribes `sink` to this run's events for `node_id` (replacing an older
  // sink of that node, which is closed: CloseRun). When the run moved past `known_round` (or ended), the
  // sink first gets the event that says so. A node the run does not know
  // (empty `session`) becomes known: its first event is kSession with its
  // credential. A known node needs its credential (PERMISSION_DENIED; not
  // in a summary-only run, whose streams get its last event: see above).
  //
  // Members first: the stream of a participant (a member, a member being
  // re-formed, or a node whose join is in progress) is a member's stream,
  // within max_watchers_per_run. Every other stream (a node that has not
  // joined yet, a status watcher, any stream of an ended run) is a
  // non-member's: at most max_nonmember_watchers_per_run of them are open;
  // past that the oldest one is ended (CloseEvicted; a node that had not
  // joined is forgotten with it) to make room, so that streams of nodes
  // about to join always get in, however many others are opened. A
  // non-member's stream becomes a member's when its node joins.
  // `admit`, when given, is called under the run's lock with the stream's
  // claimant before it is subscribed (the server charges the memory budget
  // there); its refusal is returned and nothing changes. On error the sink
  // is not subscribed. Thread-safe.
  absl::Status Watch(const std::string& node_id, std::shared_ptr<EventSink> sink, int64_t known_round,
                     const std::string& session,
                     const std::function<absl::Status(Claimant)>& admit = nullptr, const std::string& peer = "");
  // Streams open now: members' and non-members' (see Watch). Thread-safe.
  std::pair<int64_t, int64_t> watcher_counts() const;
  // Drops the sink. When the node is a member of the running round and has
  // not finished, its agent is gone: the node is lost and the survivors
  // re-form (a membership change: no restart of the budget is used).
  void Unwatch(const std::string& node_id, const EventSink* sink);

  // Accepts a worker failure of round `failure.round`. The first report of a
  // round is the root cause: the budget pays one restart (round+1 opens,
  // RESTART is pushed) or, when spent or when the failure is permanent
  // (`failure.permanent`), the run fails (RUN_FAILED) and no restart is used.
  // Later reports of that round are secondary and get the same decision.
  // Only from a member (of the running round, or of the round being
  // re-formed) with its credential: else PERMISSION_DENIED and nothing
  // changes (a summary-only run answers its verdict: see above). A run that
  // has ended answers STOP.
  // `done` gets the verdict once the change it made is saved (or why not:
  // UNAVAILABLE when the save failed); on the journal's thread, or on this
  // one when nothing had to be saved or the journal saves at once.
  using FailureCallback = absl::AnyInvocable<void(absl::StatusOr<FailureVerdict>)>;
  void ReportFailure(WorkerFailure failure, const std::string& session, FailureCallback done);
  // The same, waiting for the verdict (tests and tools; never on the
  // journal's thread).
  absl::StatusOr<FailureVerdict> ReportFailure(WorkerFailure failure, const std::string& session);

  // The exit barrier: `node_id` finished round `round`; `done` is answered
  // when every member finished (RUN_FINISHED is pushed) or after `timeout`.
  // Only from a member of `round` with its credential (PERMISSION_DENIED
  // through `done`; a summary-only run answers from its end: see above). Returns a barrier id for CancelFinished.
  uint64_t ReportFinished(const std::string& node_id, int64_t round, const std::string& session,
                          absl::Duration timeout, BarrierCallback done);
  void CancelFinished(uint64_t id);

  // This run's status (its nodes, round, store size): O(its nodes), takes
  // only this run's lock. An ended run whose nodes have all closed their
  // event streams keeps only this (see KeepOnlyStatusLocked) until the
  // registry removes it. Thread-safe.
  // With `events`, also its timeline (run_timeline.h).
  RunStatus Status(bool events = false) const;
  // Adds an entry to the run's timeline (a replica's takeover: "failover",
  // "reload"), saved with the run's next record, soon. Thread-safe.
  void Note(std::string kind, std::string detail);
  // True once the run finished or failed. Thread-safe.
  bool terminal() const;

  // A call reached the run at `now`: a store call, or a join before the
  // run has seen it (RunRegistry notes both under its lock); the run notes
  // it too when a node leaves (a join withdrawn, a stream ended), so that
  // IdleNodeless counts from the last node's leaving. Thread-safe, O(1).
  void NoteActivity(absl::Time now) { last_activity_.store(absl::ToUnixNanos(now), std::memory_order_relaxed); }
  // True for a store-only run (no node was ever admitted by Join or opened
  // an event stream in it) with no read parked and no activity since
  // `cutoff`: what RunRegistry removes after store_only_run_ttl.
  // Thread-safe, O(1). Takes only its store's lock, and only when the rest
  // says idle (the registry calls it under its own lock).
  bool IdleStoreOnly(absl::Time cutoff) const;
  // True for a run that had a node and has none now (no join in progress,
  // no member, none being re-formed, no event stream open), has not ended,
  // has no read parked and no activity since `cutoff`: what RunRegistry
  // removes after nodeless_run_ttl. Thread-safe; takes the run's lock (and
  // then its store's) only when the activity time says idle.
  bool IdleNodeless(absl::Time cutoff) const;
  // What a replica group's placement (replica_group_placer.h) needs of
  // this run, one of the job's groups: whether it ended, how many nodes
  // take part (joining, members, being re-formed; a node declared lost no
  // longer does), and whether `node_id` is one of them. Thread-safe; takes
  // the run's lock; O(its nodes).
  struct Occupancy {
    bool ended = false;
    int participants = 0;
    bool has_node = false;
  };
  Occupancy OccupancyOf(const std::string& node_id) const;
  // Whether `node_id` takes part in the run (Occupancy::has_node alone):
  // O(1). Thread-safe; takes the run's lock.
  bool TakesPart(const std::string& node_id) const;
  // The run as one replica group of a job (ReplicaGroupPlacer::States):
  // its state, whether a node takes part, its restarts and, once failed,
  // its root cause. O(1); thread-safe, takes the run's lock.
  ReplicaGroupState AsReplicaGroup() const;
  // True while no node was ever admitted (a store-only run), and the time
  // of its last activity (Unix ns). Thread-safe, O(1).
  bool store_only() const { return !had_node_.load(); }
  // True once the run ended and no event stream of it is open: its agents
  // have left (it keeps only what Status shows). Thread-safe.
  bool agents_left() const { return agents_left_.load(); }
  // Made by a join or an event stream (RunRegistry::ForJoin), not by a
  // store call: never removed to make room for another job. Thread-safe.
  void MarkMadeForJoin() { made_for_join_.store(true); }
  bool made_for_join() const { return made_for_join_.load(); }
  int64_t last_activity_ns() const { return last_activity_.load(std::memory_order_relaxed); }
  // `fn` runs once, outside the run's lock, when the run ends (finishes or
  // fails): the registry times the removal of ended runs with it. Set it
  // before the run is shared; a second call replaces the first.
  void SetOnEnded(absl::AnyInvocable<void()> fn);
  KvStore& kv() { return *kv_; }
  const std::string& run_id() const { return run_id_; }

  // Durable state (rendezvous/run/journal.h). With a journal, every change
  // of the run's durable state (a round closed, a restart or re-form
  // decided, an exit-barrier arrival, the run's end) is saved there, before
  // the calls it answers are acknowledged (the write runs after the run's
  // lock is released, before the answers; outside it, so a slow store never
  // blocks the run's other calls). `seq` numbers the records of the whole
  // server (shared by every run): a record is saved with a seq above any
  // earlier one. Set both before the run is shared; nullptr (the default):
  // nothing is saved, at no cost.
  // `incarnation` tells this Run from others under its id (state.h); the
  // journal is told nothing more once the run is closed (Close).
  //
  // Every answer is durable, or it is not an answer: the events a durable
  // change makes (ROUND_CLOSED, RESTART, NODE_LOST, RUN_FINISHED,
  // RUN_FAILED, a lost node's stream end) and the answers it gives (joins,
  // the exit barrier, failure verdicts) go out only once its record is
  // saved; events made meanwhile queue behind them (event_outbox.h). When
  // a save (or a store write's) fails or its outcome is unknown, no event
  // of it goes out, its callers get UNAVAILABLE (agents go on with the
  // next leader), every later answer of the run is UNAVAILABLE too, and
  // `on_durability_lost` is called once per failure with that status, on
  // the caller's thread and outside the run's lock (a replica closes its
  // gate there and reloads its state: etcd decides what is true).
  void SetJournal(state::RunJournal* journal, std::shared_ptr<std::atomic<int64_t>> seq, int64_t incarnation,
                  std::function<void(const absl::Status&)> on_durability_lost = nullptr);
  int64_t incarnation() const { return incarnation_; }
  // The timer whose thread makes the saves nothing answered waits on
  // (JournalSoonLocked: exit-barrier arrivals), so that etcd's round trips
  // never hold up the run timer's deadlines; must outlive the run. Unset:
  // the run's timer. Set before the run is shared.
  void SetSaveTimer(DeadlineTimer* save_timer) { save_timer_ = save_timer; }
  // A replica's gate (run/serving.h): while it is closed
  // (the replica paused or stands by) no node is declared lost - not for a
  // closed event stream, not for missed heartbeats (agents are then looking
  // for a serving leader); the liveness check counts from when it opens
  // again. nullptr (the default): always serving. Set before sharing.
  void SetGate(const ServingCheck* gate);
  // The run's durable state now. Thread-safe.
  state::RunRecord Record() const;
  // Makes a fresh run (no call served yet) what `record` describes: its
  // configuration, round, restarts spent, root cause, members with their
  // assignments and credentials, exit-barrier arrivals. Restored members
  // count as seen now (heartbeats are soft state); a running run's
  // liveness check starts at once, so a member whose agent never comes
  // back is declared lost after the keep-alive limit. A "joining" record
  // waits for its members to join again, as after a restart. Thread-safe.
  void Restore(const state::RunRecord& record);

  // Fails every parked call (ABORTED) and drops the store; used when the run
  // id is reused by a fresh job and at server shutdown. A replica that
  // stops serving gives UNAVAILABLE as `code` instead (its clients go on
  // with the next leader, not with the run's end: RunRegistry::Clear).
  void Close(const std::string& why, absl::StatusCode code = absl::StatusCode::kAborted);

 private:
  struct Member {
    NodeDesc node;
    Assignment assignment;
    bool finished = false;  // At the exit barrier of its round.
  };
  struct Joiner {
    NodeDesc node;
    int64_t last_round;
    JoinCallback done;
    // Set when the node was a member of the round being re-formed: should
    // it vanish before the round closes, it is named as lost.
    std::optional<Member> was_member;
  };
  // What an operation does once the run's lock is released (RunAll):
  // deferred_calls.h.
  using Deferred = DeferredCalls;
  // With a journal: the run's record now, saved by RunAll before `later`'s
  // calls; every event made from here on waits for that save (outbox_).
  // Call it before pushing the events the change makes.
  void JournalLocked(Deferred& later) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Saves `later`'s record (if any), then makes its calls, each told how
  // the save went (OK without a record). The save is queued to the journal
  // (RunJournal::SaveAsync): the calls run once it is saved, on the
  // journal's thread, so that no gRPC or timer thread waits on etcd; at
  // once, on this thread, with no record or with a journal that saves at
  // once. Outside the run's lock; leaves `later` empty.
  void RunAll(Deferred& later) ABSL_LOCKS_EXCLUDED(mu_);
  // A save of record `seq` (round `round`) ended with `outcome`: releases
  // the events that waited for it, or loses the run's durability. Returns
  // what the callers that waited for it get.
  absl::Status OnSaved(const absl::Status& outcome, int64_t seq, int64_t round) ABSL_LOCKS_EXCLUDED(mu_);
  // A save of the run's state failed, or its outcome is unknown: the run's
  // state in memory may be ahead of the journal. Every held event is
  // dropped, every later answer is UNAVAILABLE, and on_durability_lost_ is
  // told (the replica stops serving until a fresh load). Returns the
  // UNAVAILABLE its callers get.
  absl::Status LoseDurability(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // True once the run's durability is lost (the outbox then drops every
  // delivery).
  bool DurabilityLostLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes `event` to `node_id`'s stream alone, through the outbox.
  void PushToLocked(const std::string& node_id, const RunEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With a journal: the run's record, saved soon (kSaveSoonDelay) on the
  // timer's thread, once for every change made meanwhile. For changes that
  // nothing answered waits on (an exit-barrier arrival that is not the
  // last: its answer comes when the barrier completes, after EndLocked's
  // save), so that gRPC's threads do not block on etcd for them.
  // One such save in flight at a time (a 10,000-node record is 5 MiB):
  // changes meanwhile go with the next, started once it is answered.
  void JournalSoonLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveSoon() ABSL_LOCKS_EXCLUDED(mu_);
  void ScheduleSaveSoon(absl::Time at);  // On the save timer.
  void SoonSaved() ABSL_LOCKS_EXCLUDED(mu_);  // The save in flight answered.
  state::RunRecord RecordLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  absl::Status CheckConfigLocked(const RunConfig& config) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void MaybeCloseLocked(Deferred& later) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseRoundLocked(Deferred& later) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnLastCall(int64_t round);
  absl::StatusOr<FailureVerdict> ReportFailureLocked(WorkerFailure failure, const std::string& session,
                                                     Deferred& later) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  FailureVerdict AcceptFailureLocked(WorkerFailure failure, Deferred& later)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  FailureVerdict VerdictLocked(bool is_root) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The run fails with restarts_'s root cause: RUN_FAILED to all; the exit barrier
  // and nodes standing by are released.
  void FailRunLocked(Deferred& later) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves to kFinished or kFailed; the on-ended hook runs with `later`.
  void EndLocked(State state, Deferred& later) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushLocked(const RunEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A join taken with answer_on_stream is answered: `result` goes to
  // `node_id`'s stream as kJoinAnswered (dropped when it has none now).
  // Kept for its stream, which opens later, when the node has none now.
  void AnswerOnStream(const std::string& node_id, absl::StatusOr<Assignment> result);
  RunEvent JoinAnsweredLocked(absl::StatusOr<Assignment> result) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The current round's ROUND_CLOSED, as every stream gets it (or a late
  // stream, as its catch-up).
  RunEvent RoundClosedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnBarrierTimeout(uint64_t id);
  // Pushes JOIN_PROGRESS now, or arms a timer so that at most one goes out
  // per kProgressInterval (N joins must not cost N broadcasts).
  void ProgressLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnProgressTimer();
  // Declares `node_id` lost: NODE_LOST to all, its stream closed as stale,
  // and the survivors (plus waiting nodes) re-form in the next round.
  void LoseNodeLocked(const std::string& node_id, const std::string& why, Deferred& later)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes NODE_LOST for `cause.node_id` and ends its stream as stale.
  void AnnounceLostLocked(const WorkerFailure& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the run (RUN_FAILED, `cause` as root cause) when `can_rejoin`
  // nodes are fewer than MIN and no restart is left to wait for a
  // replacement with; true when it did.
  bool FailIfTooFewLocked(WorkerFailure cause, int can_rejoin, Deferred& later) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Loses `node_id`, a member of the round being re-formed (in reforming_).
  void LoseReformingLocked(const std::string& node_id, const std::string& why, Deferred& later)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens round+1 for the current members and waiting nodes, without using
  // the restart budget, and pushes RESTART(membership_change) with `cause`.
  void ReformLocked(WorkerFailure cause, Deferred& later) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks every member's last heartbeat once per keep-alive interval.
  void ArmLivenessLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnLivenessTimer();
  // True when `node_id` is pending, a member, or a member being re-formed.
  bool IsParticipantLocked(const std::string& node_id) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const std::string run_id_;
  DeadlineTimer* const timer_;
  const ServerLimits limits_;
  const std::shared_ptr<KvStore> kv_;
  state::RunJournal* journal_ = nullptr;  // Set before sharing (SetJournal).
  const ServingCheck* gate_ = nullptr;  // Set before sharing (SetGate).
  std::shared_ptr<std::atomic<int64_t>> journal_seq_;
  int64_t incarnation_ = 0;  // Set before sharing (SetJournal).
  // Set by Close: nothing more goes to the journal (the registry drops the
  // run's record and keys when it removes it).
  const std::shared_ptr<std::atomic<bool>> journal_closed_ = std::make_shared<std::atomic<bool>>(false);
  // Set when a save failed (LoseDurability; the store's writes set it too).
  const std::shared_ptr<std::atomic<bool>> durability_lost_ = std::make_shared<std::atomic<bool>>(false);
  std::function<void(const absl::Status&)> on_durability_lost_;  // Set before sharing (SetJournal).
  DeadlineTimer* save_timer_ = nullptr;                           // Set before sharing (SetSaveTimer).

  mutable absl::Mutex mu_;
  bool save_soon_ ABSL_GUARDED_BY(mu_) = false;  // A SaveSoon is scheduled, or waits for the one in flight.
  bool soon_in_flight_ ABSL_GUARDED_BY(mu_) = false;  // A SaveSoon's save is not answered yet.
  // Events waiting for the save of the state they announce.
  EventOutbox outbox_ ABSL_GUARDED_BY(mu_);
  State state_ ABSL_GUARDED_BY(mu_) = State::kJoining;
  bool configured_ ABSL_GUARDED_BY(mu_) = false;
  RunConfig config_ ABSL_GUARDED_BY(mu_);
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  // A re-form after a failure or loss closes as soon as this many nodes
  // joined; 0 for a fresh round (MIN/MAX and the last call apply).
  int reform_target_ ABSL_GUARDED_BY(mu_) = 0;
  NodeList<Joiner> pending_ ABSL_GUARDED_BY(mu_);
  // Answers of joins taken to be answered on the stream (AnswerOnStream)
  // whose node had no stream open yet: sent when it opens (Watch). At most
  // max_nodes entries.
  absl::flat_hash_map<std::string, absl::StatusOr<Assignment>> unsent_answers_ ABSL_GUARDED_BY(mu_);
  bool last_call_armed_ ABSL_GUARDED_BY(mu_) = false;
  DeadlineTimer::Id last_call_timer_ ABSL_GUARDED_BY(mu_) = 0;
  NodeList<Member> members_ ABSL_GUARDED_BY(mu_);
  // Members of the round being re-formed that have not rejoined yet; one
  // lost meanwhile is named (NODE_LOST) and no longer waited for.
  NodeList<Member> reforming_ ABSL_GUARDED_BY(mu_);
  // Members (of members_) at the exit barrier.
  int finished_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Nodes parked at the exit barrier (exit_barrier.h).
  ExitBarrierWaiters barrier_waiters_ ABSL_GUARDED_BY(mu_){timer_};
  // Restarts spent and the root cause of the last incident (and the round
  // it happened in): the restart policy (restart_policy.h).
  RestartPolicy restarts_ ABSL_GUARDED_BY(mu_);
  // The run's open event streams, members' and non-members' (event_streams.h).
  EventStreams streams_ ABSL_GUARDED_BY(mu_);
  HeldCharge run_charge_;  // The run's own charge (kRun), given back when it goes.
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int last_progress_joined_ ABSL_GUARDED_BY(mu_) = -1;
  bool progress_armed_ ABSL_GUARDED_BY(mu_) = false;
  bool liveness_armed_ ABSL_GUARDED_BY(mu_) = false;
  // Runs once when the run ends (SetOnEnded).
  absl::AnyInvocable<void()> on_ended_ ABSL_GUARDED_BY(mu_);
  // Every known node (credential, last sign of life), the credentials the
  // last round close replaced, and the nodes declared lost (membership.h).
  Membership membership_ ABSL_GUARDED_BY(mu_);
  // True when `session` is `node_id`'s credential of the round before, its
  // grace not passed, and the node still takes part (Heartbeat, Watch).
  bool PreviousSessionLocked(const std::string& node_id, const std::string& session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Once the run has ended and no event stream of it is open (its nodes
  // have left), the members, credentials, lost nodes' ids and node index are
  // freed, and what Status shows of the nodes is kept as a RunSummary
  // (run_summary.h: about 90 bytes per node instead of about 600). The root cause, the configuration and
  // the store stay. A node's later calls are answered from the run's end
  // without a credential check (status_only_ in Join, Heartbeat, Watch,
  // ReportFailure and ReportFinished): what they learn is what Status shows.
  // Skipped (the run stays whole) when the nodes' text passes 4 GiB.
  // Call at the end of an operation (it frees pending_, barrier_waiters_ and the
  // members that the operation may still use). Idempotent.
  void MaybeKeepOnlyStatusLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KeepOnlyStatusLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The answer to a call in a status-only run's name that needs a member:
  // FAILED_PRECONDITION naming the run's end.
  absl::Status EndedLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool status_only_ ABSL_GUARDED_BY(mu_) = false;
  // Whether a node was ever admitted (not a store-only run), and the last
  // activity's time (Unix ns): IdleStoreOnly.
  std::atomic<bool> had_node_{false};
  std::atomic<bool> agents_left_{false};  // status_only_, readable without mu_.
  std::atomic<bool> made_for_join_{false};
  std::atomic<int64_t> last_activity_{0};
  RunSummary summary_ ABSL_GUARDED_BY(mu_);  // Once status_only_.
  // What happened to the run (run_timeline.h); durable with its record.
  RunTimeline timeline_ ABSL_GUARDED_BY(mu_);
  absl::Time created_ ABSL_GUARDED_BY(mu_);  // Restored from the record after a failover.
  // Adds to the timeline: call before the JournalLocked of the change, so
  // that the change's record carries it.
  void NoteLocked(std::string kind, std::string detail) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

const char* StateName(Run::State state);

}  // namespace meshrun::rendezvous
