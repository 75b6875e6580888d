// Run: the exit barrier. A node whose workers all exited 0 waits until
// every member finished (RUN_FINISHED) or its timeout passes.
#include "rendezvous/run/run.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace meshrun::rendezvous {

uint64_t Run::ReportFinished(const std::string& node_id, int64_t round, const std::string& session,
                             absl::Duration timeout, BarrierCallback done) {
  Deferred later;
  uint64_t id = 0;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    BarrierResult now;
    now.node_count = static_cast<int>(members_.size());
    Member* member = members_.find(node_id);
    if (status_only_) {
      // Over, its nodes gone: the answer is how it ended (no credential left).
      if (state_ == State::kFinished && round == round_) {
        now.node_count = now.finished_nodes = static_cast<int>(summary_.size());
        now.all_finished = true;
        later.Answer(std::move(done), now);
      } else {
        refused = EndedLocked();
      }
    } else if (absl::Status s = membership_.Check(node_id, session); !s.ok()) {
      refused = s;
    } else if (!member) {
      refused = absl::PermissionDeniedError(absl::StrCat("node '", node_id.substr(0, 64), "' is not a member of run '",
                                                         run_id_.substr(0, 64), "' round ", round_));
    } else if (state_ == State::kFinished && round == round_) {
      now.all_finished = true;
      now.finished_nodes = now.node_count;
      later.Answer(std::move(done), now);
    } else if (state_ != State::kRunning || round != round_) {
      refused = absl::FailedPreconditionError(absl::StrCat(
          "finish reported for round ", round, " but run '", run_id_, "' is ", StateName(state_),
          " at round ", round_));
    } else {
      if (!member->finished) {
        member->finished = true;
        ++finished_count_;
        // An exit-barrier arrival is made durable soon, with the others
        // that arrive meanwhile (the last one at once: EndLocked). Nothing
        // is answered until the barrier completes, so nothing waits on it;
        // an arrival the leader had not saved when it died is reported
        // again by its agent to the next leader.
        if (finished_count_ < static_cast<int>(members_.size())) JournalSoonLocked();
      }
      if (finished_count_ >= static_cast<int>(members_.size())) {
        EndLocked(State::kFinished, later);
        now.all_finished = true;
        now.finished_nodes = now.node_count;
        for (BarrierCallback& cb : barrier_waiters_.TakeAll()) {
          later.Answer(std::move(cb), now);
        }
        later.Answer(std::move(done), now);
        // Nodes standing by are not needed any more.
        for (auto& j : pending_) {
          later.Answer(std::move(j.done), absl::AbortedError("finished: the job completed without this node"));
        }
        pending_.clear();
        RunEvent ev;
        ev.kind = RunEvent::Kind::kRunFinished;
        ev.round = round_;
        ev.restart_count = restarts_.spent();
        PushLocked(ev);
      } else {
        std::weak_ptr<Run> weak = weak_from_this();
        id = barrier_waiters_.Park(absl::Now() + timeout, std::move(done), [weak](uint64_t waiter) {
          if (auto self = weak.lock()) self->OnBarrierTimeout(waiter);
        });
      }
    }
    MaybeKeepOnlyStatusLocked();
  }
  if (!refused.ok()) {
    done(refused);
    return 0;
  }
  RunAll(later);  // Its calls are told how the save went.
  return id;
}

void Run::OnBarrierTimeout(uint64_t id) {
  BarrierCallback cb;
  BarrierResult result;
  {
    absl::MutexLock lock(&mu_);
    std::optional<BarrierCallback> taken = barrier_waiters_.Take(id, /*timed_out=*/true);
    if (!taken) return;
    cb = std::move(*taken);
    result.finished_nodes = finished_count_;
    result.node_count = static_cast<int>(members_.size());
  }
  cb(result);
}

void Run::CancelFinished(uint64_t id) {
  BarrierCallback cb;
  {
    absl::MutexLock lock(&mu_);
    std::optional<BarrierCallback> taken = barrier_waiters_.Take(id, /*timed_out=*/false);
    if (!taken) return;
    cb = std::move(*taken);
  }
  cb(absl::CancelledError("exit barrier cancelled by the client"));
}

}  // namespace meshrun::rendezvous
