// Run: losing members (a closed stream, a silent node), re-forming without
// them, failing the run when too few are left, and the liveness timer.
#include "rendezvous/run/run.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace meshrun::rendezvous {

void Run::ArmLivenessLocked() {
  if (liveness_armed_) return;
  liveness_armed_ = true;
  std::weak_ptr<Run> weak = weak_from_this();
  timer_->Schedule(absl::Now() + config_.keep_alive_interval, [weak] {
    if (auto self = weak.lock()) self->OnLivenessTimer();
  });
}

void Run::OnLivenessTimer() {
  Deferred later;
  {
    absl::MutexLock lock(&mu_);
    liveness_armed_ = false;
    membership_.DropPreviousIfPast(absl::Now());
    if (state_ == State::kFinished || state_ == State::kFailed) return;
    const absl::Time now = absl::Now();
    if (gate_ != nullptr && !gate_->serving()) {
      // Not serving (paused): heartbeats are refused, so silence proves
      // nothing; count from now, and look again later.
      for (const auto& m : members_) membership_.Touch(m.node.node_id, now);
      ArmLivenessLocked();
      return;
    }
    const absl::Duration limit = config_.keep_alive_interval * config_.keep_alive_max_attempt;
    std::vector<std::string> silent;
    for (const auto& m : members_) {
      if (m.finished) continue;
      const absl::Time seen = membership_.LastSeen(m.node.node_id);
      if (seen != absl::InfinitePast() && now - seen > limit) {
        silent.push_back(m.node.node_id);
      }
    }
    for (const auto& id : silent) {
      LoseNodeLocked(id, absl::StrCat("no keep-alive for ", absl::FormatDuration(now - membership_.LastSeen(id)), " (limit ",
                                      absl::FormatDuration(limit), ")"),
                     later);
    }
    if (!members_.empty() || !pending_.empty()) ArmLivenessLocked();
    // A lost node's stream is closed as stale (its Unwatch finds nothing): the
    // run may have ended here with no stream left.
    MaybeKeepOnlyStatusLocked();
  }
  RunAll(later);  // Its calls are told how the save went.
}

void Run::LoseNodeLocked(const std::string& node_id, const std::string& why, Deferred& later) {
  std::optional<Member> m = members_.erase(node_id);
  if (!m) {
    // A member of the round being re-formed that had not rejoined yet.
    if (reforming_.contains(node_id) && state_ == State::kJoining) LoseReformingLocked(node_id, why, later);
    return;
  }
  if (m->finished) --finished_count_;
  membership_.MarkLost(node_id);
  WorkerFailure cause;
  cause.node_id = node_id;
  cause.hostname = m->node.hostname;
  cause.node_rank = m->assignment.node_rank;
  cause.round = round_;
  cause.message = absl::StrCat("node ", m->node.hostname, " (node rank ", cause.node_rank, ") was lost: ", why);
  Logger("rdzv")->info("run '{}': {}", run_id_, cause.message);
  NoteLocked("node lost", cause.message);
  JournalLocked(later);  // Without the lost member, before NODE_LOST goes out.
  AnnounceLostLocked(cause);
  if (FailIfTooFewLocked(cause, static_cast<int>(members_.size() + pending_.size()), later)) return;
  ReformLocked(std::move(cause), later);
}

void Run::AnnounceLostLocked(const WorkerFailure& cause) {
  RunEvent lost;
  lost.kind = RunEvent::Kind::kNodeLost;
  lost.round = round_;
  lost.node_id = cause.node_id;
  lost.root_cause = cause;
  PushLocked(lost);
  if (!DurabilityLostLocked()) outbox_.CloseStale(streams_.Remove(cause.node_id), cause.message);
}

bool Run::FailIfTooFewLocked(WorkerFailure cause, int can_rejoin, Deferred& later) {
  if (can_rejoin >= config_.min_nodes || restarts_.CanWaitForReplacement(config_.max_restarts)) return false;
  // Too few nodes left and no restart to wait for a replacement with: the
  // job fails now, on every node, naming the lost node.
  cause.exit_code = 1;
  cause.time = absl::Now();
  restarts_.Record(std::move(cause));
  FailRunLocked(later);
  return true;
}

void Run::LoseReformingLocked(const std::string& node_id, const std::string& why, Deferred& later) {
  std::optional<Member> r = reforming_.erase(node_id);
  if (!r) return;
  membership_.MarkLost(r->node.node_id);
  WorkerFailure cause;
  cause.node_id = r->node.node_id;
  cause.hostname = r->node.hostname;
  cause.node_rank = r->assignment.node_rank;
  cause.round = round_;
  cause.message = absl::StrCat("node ", r->node.hostname, " (node rank ", cause.node_rank, " of round ",
                               r->assignment.round, ") was lost too: ", why);
  Logger("rdzv")->info("run '{}': {}", run_id_, cause.message);
  NoteLocked("node lost", cause.message);
  JournalLocked(later);  // Without the lost member, before NODE_LOST goes out.
  AnnounceLostLocked(cause);
  // The re-form no longer waits for it.
  reform_target_ = std::max(1, reform_target_ - 1);
  if (FailIfTooFewLocked(cause, static_cast<int>(reforming_.size() + pending_.size()), later)) return;
  MaybeCloseLocked(later);
}

void Run::FailRunLocked(Deferred& later) {
  EndLocked(State::kFailed, later);
  RunEvent ev;
  ev.kind = RunEvent::Kind::kRunFailed;
  ev.round = round_;
  ev.restart_count = restarts_.spent();
  ev.root_cause = restarts_.root_cause();
  PushLocked(ev);
  // Nobody will finish: release the exit barrier and any node standing by.
  for (BarrierCallback& cb : barrier_waiters_.TakeAll()) {
    later.Answer(std::move(cb), absl::AbortedError("the run failed on another node"));
  }
  for (auto& j : pending_) {
    later.Answer(std::move(j.done), absl::AbortedError("the run failed"));
  }
  pending_.clear();
}

void Run::ReformLocked(WorkerFailure cause, Deferred& later) {
  cause.time = absl::Now();
  const int survivors = static_cast<int>(members_.size());
  reform_target_ = std::max(1, std::min(config_.max_nodes, survivors + static_cast<int>(pending_.size())));
  ++round_;
  state_ = State::kJoining;
  reforming_ = std::move(members_);
  members_.clear();
  finished_count_ = 0;
  RunEvent ev;
  ev.kind = RunEvent::Kind::kRestart;
  ev.round = round_;
  ev.restart_count = restarts_.spent();
  ev.membership_change = true;
  ev.root_cause = std::move(cause);
  NoteLocked("re-form", absl::StrCat("round ", round_, " re-forms with the ", reform_target_,
                                     " node(s) left (no restart used)"));
  JournalLocked(later);  // The re-form, before RESTART goes out.
  PushLocked(ev);
  MaybeCloseLocked(later);
}

}  // namespace meshrun::rendezvous
