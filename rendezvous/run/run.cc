// Run: sessions, joining a round (and its progress events), heartbeats,
// status and closing. The other parts of Run: run_watch.cc (event streams),
// run_round.cc (closing a round), run_membership.cc (lost nodes, re-forms,
// liveness), run_failure.cc (failures, restarts), run_exit.cc (the exit
// barrier).
#include "rendezvous/run/run.h"

#include "common/setting.h"
#include "common/stale.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace meshrun::rendezvous {
namespace {

// "2", or "2 to 4" for a range of node counts.
std::string NnodesText(const RunConfig& c) {
  return c.min_nodes == c.max_nodes ? absl::StrCat(c.max_nodes)
                                    : absl::StrCat(c.min_nodes, " to ", c.max_nodes);
}

}  // namespace

const char* StateName(Run::State state) {
  switch (state) {
    case Run::State::kJoining: return "joining";
    case Run::State::kRunning: return "running";
    case Run::State::kFinished: return "finished";
    case Run::State::kFailed: return "failed";
  }
  return "?";
}

Run::Run(std::string run_id, DeadlineTimer* timer, const ServerLimits& limits,
         std::shared_ptr<std::atomic<int64_t>> server_bytes, MemoryBudget* budget, HeldCharge run_charge)
    : run_id_(std::move(run_id)),
      timer_(timer),
      limits_(limits),
      kv_(std::make_shared<KvStore>(run_id_, timer, limits, std::move(server_bytes), budget)),
      run_charge_(std::move(run_charge)),
      membership_(run_id_, budget),
      timeline_(limits.max_run_events),
      created_(absl::Now()) {}

void Run::NoteLocked(std::string kind, std::string detail) {
  timeline_.Add(absl::Now(), std::move(kind), std::move(detail));
}

void Run::Note(std::string kind, std::string detail) {
  absl::MutexLock lock(&mu_);
  NoteLocked(std::move(kind), std::move(detail));
  JournalSoonLocked();
}

Run::~Run() = default;

bool Run::IsParticipantLocked(const std::string& node_id) const {
  return members_.contains(node_id) || reforming_.contains(node_id) || pending_.contains(node_id);
}

absl::Status Run::CheckConfigLocked(const RunConfig& config) const {
  if (config.min_nodes != config_.min_nodes || config.max_nodes != config_.max_nodes) {
    return SettingStatus(absl::StatusCode::kFailedPrecondition,
                         absl::StrCat("the node count conflicts in run '", run_id_, "': this node's join asks for ",
                                      NnodesText(config), " nodes, the run has ", NnodesText(config_)),
                         kNodeCount);
  }
  if (config.max_restarts != config_.max_restarts) {
    return SettingStatus(absl::StatusCode::kFailedPrecondition,
                         absl::StrCat("the restart limit conflicts in run '", run_id_, "': this node's join allows ",
                                      config.max_restarts, " restarts, the run allows ", config_.max_restarts),
                         kMaxRestarts);
  }
  return absl::OkStatus();
}

bool Run::IdleStoreOnly(absl::Time cutoff) const {
  // The store's lock last, and only for a run that is otherwise idle.
  return !had_node_.load() && last_activity_.load(std::memory_order_relaxed) < absl::ToUnixNanos(cutoff) &&
         kv_->waiters() == 0;
}

bool Run::Join(const NodeDesc& node, const RunConfig& config, int64_t last_round, const std::string& session,
               JoinCallback done, const std::string& peer, JoinCallback on_stream_answered) {
  bool on_stream = false;
  Deferred later;
  absl::Status refused;
  {
    absl::ReleasableMutexLock lock(&mu_);
    bool made_session = false;
    if (status_only_) {
      refused = EndedLocked();
    } else if (const Membership::Node* k = membership_.Find(node.node_id)) {
      // Made known by its own stream over this connection, not joined yet:
      // the join takes the stream's credential.
      const bool own_stream = session.empty() && !peer.empty() && k->peer == peer &&
                              k->last_seen == absl::InfinitePast() && !IsParticipantLocked(node.node_id);
      refused = own_stream ? absl::OkStatus() : membership_.Check(node.node_id, session);
    } else if (!session.empty()) {
      refused = membership_.Check(node.node_id, session);  // Unknown: PERMISSION_DENIED.
    } else if (refused = membership_.Admit(node.node_id, peer, Claimant::kMember); refused.ok()) {
      made_session = true;
    }
    if (!refused.ok()) {
      lock.Release();
      done(refused);
      return false;
    }
    if (!configured_) {
      config_ = config;
      configured_ = true;
    }
    refused = CheckConfigLocked(config);
    if (refused.ok() && membership_.IsLost(node.node_id)) {
      refused = StaleStatus(absl::StrCat("stale: node ", node.hostname, " was declared lost in run '", run_id_,
                                         "'; rejoin as a new member"));
    }
    if (refused.ok() && (state_ == State::kFinished || state_ == State::kFailed)) {
      refused = absl::FailedPreconditionError(absl::StrCat(
          "run '", run_id_, "' has already ", StateName(state_), " at round ", round_));
    }
    if (refused.ok() && pending_.contains(node.node_id)) {
      refused = absl::AlreadyExistsError(absl::StrCat("node ", node.node_id, " is already joining"));
    }
    if (refused.ok() && node.node_rank_hint >= 0) {
      // Only with an explicit --node_rank: O(joining) for such a node.
      for (const auto& j : pending_) {
        if (j.node.node_rank_hint == node.node_rank_hint) {
          refused = SettingStatus(
              absl::StatusCode::kFailedPrecondition,
              absl::StrCat("node rank ", node.node_rank_hint, " is already taken in run '", run_id_, "' by ",
                           j.node.hostname, " (pid ", j.node.pid, ", ", j.node.addr, "); refused for ", node.hostname,
                           " (pid ", node.pid, ", ", node.addr, ")"),
              kNodeRank);
        }
      }
    }
    if (refused.ok() && state_ == State::kRunning) {
      if (members_.contains(node.node_id) && last_round >= round_) {
        refused = absl::FailedPreconditionError(absl::StrCat(
            "node ", node.hostname, " is already a member of running round ", round_));
      }
    }
    if (refused.ok()) {
      had_node_.store(true);  // Admitted: no longer a store-only run.
      membership_.Touch(node.node_id, absl::Now());
      std::optional<Member> was_member = reforming_.erase(node.node_id);
      if (on_stream_answered) {
        on_stream = true;
        done = [weak = weak_from_this(), id = node.node_id,
                then = std::move(on_stream_answered)](absl::StatusOr<Assignment> result) mutable {
          if (auto self = weak.lock()) self->AnswerOnStream(id, result);
          then(std::move(result));
        };
      }
      pending_.push_back(Joiner{node, last_round, std::move(done), std::move(was_member)});
      // A node joining: its stream (opened before) is a member's from now
      // on, before any event below reaches it (this join may close the
      // round: its ROUND_CLOSED must not be charged as a non-member's).
      streams_.PromoteToMember(node.node_id);
      if (state_ == State::kRunning) {
        RunEvent ev;
        ev.kind = RunEvent::Kind::kNodeWaiting;
        ev.round = round_;
        ev.node_id = node.node_id;
        PushLocked(ev);
        // Below MAX the job grows: re-form with the newcomer. At MAX it
        // stands by until a node is lost.
        if (static_cast<int>(members_.size()) < config_.max_nodes) {
          WorkerFailure cause;
          cause.node_id = node.node_id;
          cause.hostname = node.hostname;
          cause.message = absl::StrCat("node ", node.hostname, " joined");
          ReformLocked(std::move(cause), later);
        }
      } else {
        MaybeCloseLocked(later);
        if (state_ == State::kJoining) ProgressLocked();
      }
    }
    if (!refused.ok() && made_session) membership_.Forget(node.node_id);
  }
  if (!refused.ok()) {
    done(refused);
    return false;
  }
  RunAll(later);  // Its calls are told how the save went.
  return on_stream;
}

void Run::AnswerOnStream(const std::string& node_id, absl::StatusOr<Assignment> result) {
  absl::MutexLock lock(&mu_);
  if (!streams_.Has(node_id)) {
    // Its stream is not open yet (the agent opens it right after its join):
    // the answer waits for it (Watch). Bounded: one per node of a round.
    if (static_cast<int64_t>(unsent_answers_.size()) < std::max(config_.max_nodes, 1)) {
      unsent_answers_.insert_or_assign(node_id, std::move(result));
    }
    return;
  }
  PushToLocked(node_id, JoinAnsweredLocked(std::move(result)));
}

RunEvent Run::RoundClosedLocked() const {
  RunEvent ev;
  ev.kind = RunEvent::Kind::kRoundClosed;
  ev.round = round_;
  ev.restart_count = restarts_.spent();
  return ev;
}

RunEvent Run::JoinAnsweredLocked(absl::StatusOr<Assignment> result) const {
  RunEvent ev;
  ev.kind = RunEvent::Kind::kJoinAnswered;
  ev.round = round_;
  ev.restart_count = restarts_.spent();
  if (result.ok()) {
    ev.round = result->round;
    ev.assignment = std::move(*result);
  } else {
    ev.refusal = result.status();
  }
  return ev;
}

namespace {
constexpr absl::Duration kProgressInterval = absl::Seconds(1);
}  // namespace

void Run::ProgressLocked() {
  if (progress_armed_) return;
  const absl::Time now = absl::Now();
  if (now - last_progress_ >= kProgressInterval) {
    const int joined = static_cast<int>(pending_.size());
    if (joined == last_progress_joined_) return;
    RunEvent ev;
    ev.kind = RunEvent::Kind::kJoinProgress;
    ev.round = round_;
    ev.joined = joined;
    ev.min_nodes = config_.min_nodes;
    ev.max_nodes = config_.max_nodes;
    // Only the nodes waiting in this round hear it (a refused node does not).
    for (const auto& j : pending_) {
      PushToLocked(j.node.node_id, ev);
    }
    last_progress_ = now;
    last_progress_joined_ = joined;
    return;
  }
  progress_armed_ = true;
  std::weak_ptr<Run> weak = weak_from_this();
  timer_->Schedule(last_progress_ + kProgressInterval, [weak] {
    if (auto self = weak.lock()) self->OnProgressTimer();
  });
}

void Run::OnProgressTimer() {
  absl::MutexLock lock(&mu_);
  progress_armed_ = false;
  if (state_ == State::kJoining) ProgressLocked();
}

void Run::CancelJoin(const std::string& node_id) {
  JoinCallback cb;
  {
    absl::MutexLock lock(&mu_);
    std::optional<Joiner> j = pending_.erase(node_id);
    if (!j) return;
    NoteActivity(absl::Now());  // Idle (IdleNodeless) from its last node's leaving.
    cb = std::move(j->done);
    // A member of the round being re-formed is again one that has not
    // re-joined yet: still waited for, and named when its stream ends (its
    // connection's calls end in either order).
    if (j->was_member && state_ == State::kJoining) reforming_.push_back(std::move(*j->was_member));
    if (state_ == State::kJoining) ProgressLocked();
  }
  cb(absl::CancelledError("join cancelled by the client"));
}

absl::StatusOr<int64_t> Run::Heartbeat(const std::string& node_id, const std::string& session) {
  absl::MutexLock lock(&mu_);
  if (status_only_) return round_;  // Over, its nodes gone: nothing to keep alive.
  if (absl::Status s = membership_.Check(node_id, session); !s.ok()) {
    if (!PreviousSessionLocked(node_id, session)) return s;
  }
  if (membership_.IsLost(node_id)) {
    return StaleStatus(absl::StrCat("stale: this node was declared lost in run '", run_id_, "' (now at round ", round_,
                                    "); rejoin as a new member"));
  }
  membership_.Touch(node_id, absl::Now());
  return round_;
}

void Run::SetOnEnded(absl::AnyInvocable<void()> fn) {
  absl::MutexLock lock(&mu_);
  on_ended_ = std::move(fn);
}

bool Run::PreviousSessionLocked(const std::string& node_id, const std::string& session) {
  return membership_.AcceptsPrevious(node_id, session, absl::Now()) && IsParticipantLocked(node_id);
}

void Run::EndLocked(State state, Deferred& later) {
  state_ = state;
  if (state == State::kFinished) {
    NoteLocked("finished", absl::StrCat("every node finished round ", round_, " (", restarts_.spent(), " restart(s) used)"));
  } else {
    NoteLocked("failed", restarts_.has_root_cause()
                             ? absl::StrCat("round ", round_, ": ", DescribeRootCause(restarts_.root_cause()))
                             : absl::StrCat("round ", round_));
  }
  membership_.DropPrevious();
  JournalLocked(later);
  if (on_ended_) later.IfSaved(std::exchange(on_ended_, nullptr));
}

bool Run::terminal() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kFinished || state_ == State::kFailed;
}

void Run::Close(const std::string& why, absl::StatusCode code) {
  Deferred later;
  journal_closed_->store(true);
  {
    absl::MutexLock lock(&mu_);
    const absl::Status answer(code, why);
    for (auto& j : pending_) {
      later.Answer(std::move(j.done), answer);
    }
    pending_.clear();
    for (BarrierCallback& cb : barrier_waiters_.TakeAll()) {
      later.Answer(std::move(cb), answer);
    }
    if (last_call_armed_) timer_->Cancel(last_call_timer_);
    last_call_armed_ = false;
    // Watchers learn why (no re-form is announced: their streams end with
    // the reason, and their later Unwatch finds nothing to lose).
    streams_.EndAll(why);
  }
  RunAll(later);  // Its calls are told how the save went.
  kv_->Close(why);
}

}  // namespace meshrun::rendezvous
