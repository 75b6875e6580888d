// RestartPolicy: torchrun's restart policy for one run (its --max_restarts),
// the part of a Run's state that decides between restart and stop. The
// budget is job-wide: one incident (the first failure reported in a running
// round, its root cause) spends one restart, however many workers and nodes
// it took down; later reports of that round are secondary and cost nothing
// (torchrun's agents each count their own restarts instead: one incident on
// N nodes spends N). A permanent failure (the worker's own "do not retry")
// is never restarted. Pure: no lock, no time source; the Run holds one under
// its lock (a RunRecord carries `spent` and the root cause across a
// failover).
#pragma once

#include <optional>

#include "proto/types.h"

namespace meshrun::rendezvous {

class RestartPolicy {
 public:
  // Restarts spent so far (TORCHELASTIC_RESTART_COUNT of the next round).
  int spent() const { return spent_; }
  // The root cause of the last incident; a default WorkerFailure before any.
  bool has_root_cause() const { return has_root_cause_; }
  const WorkerFailure& root_cause() const { return root_cause_; }

  // The root cause of a running round's incident: recorded, and true when
  // the run restarts (a restart spent: fewer than `max_restarts` spent, and
  // the failure is not permanent), false when it fails.
  bool AcceptFailure(WorkerFailure failure, int max_restarts) {
    Record(std::move(failure));
    if (root_cause_.permanent || spent_ >= max_restarts) return false;
    ++spent_;
    return true;
  }
  // Whether a restart is left to wait for a replacement node with, when
  // too few nodes are left to go on (a lost node).
  bool CanWaitForReplacement(int max_restarts) const { return spent_ < max_restarts; }
  // The run fails because of `cause` (nodes lost, too few left, no restart
  // to wait with): recorded as the root cause, no restart spent.
  void Record(WorkerFailure cause) {
    root_cause_ = std::move(cause);
    has_root_cause_ = true;
  }
  // As a RunRecord had it (a replica taking over).
  void Restore(int spent, const std::optional<WorkerFailure>& root_cause) {
    spent_ = spent;
    has_root_cause_ = root_cause.has_value();
    root_cause_ = root_cause.value_or(WorkerFailure());
  }

 private:
  int spent_ = 0;
  bool has_root_cause_ = false;
  WorkerFailure root_cause_;
};

}  // namespace meshrun::rendezvous
