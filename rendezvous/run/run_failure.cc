// Run: worker failures. The first report of a round is the root cause and
// costs one restart of the job-wide budget (or fails the run); later
// reports of that round are secondary and get the same verdict.
#include "rendezvous/run/run.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"

namespace meshrun::rendezvous {

FailureVerdict Run::VerdictLocked(bool is_root) const {
  FailureVerdict v;
  // A run that is over (failed, or finished with an earlier incident on
  // record) has nothing to restart: a late report is told to stop.
  v.decision = state_ == State::kFailed || state_ == State::kFinished ? Decision::kStop : Decision::kRestart;
  v.next_round = round_;
  v.root_cause = restarts_.root_cause();
  v.is_root_cause = is_root;
  return v;
}

FailureVerdict Run::AcceptFailureLocked(WorkerFailure failure, Deferred& later) {
  failure.time = absl::Now();
  // A permanent failure is not retried: the run fails now, budget or not.
  const bool restart = restarts_.AcceptFailure(std::move(failure), config_.max_restarts);
  RunEvent ev;
  ev.root_cause = restarts_.root_cause();
  if (restart) {
    // Every member re-forms, plus nodes waiting.
    const int survivors = static_cast<int>(members_.size());
    reform_target_ = std::max(1, std::min(config_.max_nodes,
                                          survivors + static_cast<int>(pending_.size())));
    ++round_;
    state_ = State::kJoining;
    reforming_ = std::move(members_);
    members_.clear();
    finished_count_ = 0;
    ev.kind = RunEvent::Kind::kRestart;
    ev.round = round_;
    ev.restart_count = restarts_.spent();
    NoteLocked("restart", absl::StrCat("restart ", restarts_.spent(), " of ", config_.max_restarts, " (round ", round_,
                                       "): ", DescribeRootCause(*ev.root_cause)));
    JournalLocked(later);  // The restart spent, before RESTART goes out (EndLocked saves a failed run).
    PushLocked(ev);
    MaybeCloseLocked(later);
  } else {
    FailRunLocked(later);
  }
  return VerdictLocked(/*is_root=*/true);
}

void Run::ReportFailure(WorkerFailure failure, const std::string& session, FailureCallback done) {
  Deferred later;
  absl::StatusOr<FailureVerdict> verdict;
  {
    absl::MutexLock lock(&mu_);
    verdict = ReportFailureLocked(std::move(failure), session, later);
  }
  // The verdict only once the restart (or the run's failure) is saved.
  later.Answer(std::move(done), std::move(verdict));
  RunAll(later);
}

absl::StatusOr<FailureVerdict> Run::ReportFailure(WorkerFailure failure, const std::string& session) {
  absl::Notification answered;
  absl::StatusOr<FailureVerdict> out;
  ReportFailure(std::move(failure), session, [&](absl::StatusOr<FailureVerdict> v) {
    out = std::move(v);
    answered.Notify();
  });
  answered.WaitForNotification();
  return out;
}

absl::StatusOr<FailureVerdict> Run::ReportFailureLocked(WorkerFailure failure, const std::string& session,
                                                        Deferred& later) {
  FailureVerdict verdict;
  {
    if (status_only_) {
      // Over, its nodes gone: a late report gets the run's verdict, as a
      // secondary one would (no credential left to check).
      if (!restarts_.has_root_cause() || failure.round > round_) return EndedLocked();
      return VerdictLocked(/*is_root=*/false);
    }
    if (absl::Status s = membership_.Check(failure.node_id, session); !s.ok()) return s;
    if (!IsParticipantLocked(failure.node_id)) {
      return absl::PermissionDeniedError(absl::StrCat("node '", failure.node_id.substr(0, 64),
                                                      "' is not a member of run '", run_id_.substr(0, 64),
                                                      "' round ", round_));
    }
    if (static_cast<int64_t>(failure.message.size()) > limits_.max_message_bytes) {
      failure.message.resize(static_cast<size_t>(limits_.max_message_bytes));
      failure.message += " [cut at max_message_bytes]";
    }
    if (failure.round > round_) {
      return absl::InvalidArgumentError(absl::StrCat("failure reported for round ", failure.round,
                                                     " but run '", run_id_, "' is at round ", round_));
    }
    if (failure.round < round_ || state_ != State::kRunning) {
      // Secondary: this round's incident was already accepted.
      if (!restarts_.has_root_cause()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "failure reported for round ", failure.round, " of run '", run_id_, "', which is ",
            StateName(state_)));
      }
      verdict = VerdictLocked(/*is_root=*/false);
    } else {
      verdict = AcceptFailureLocked(std::move(failure), later);
    }
    MaybeKeepOnlyStatusLocked();
  }
  return verdict;
}

}  // namespace meshrun::rendezvous
