// ReplicaGroupEnds: the groups of each job of replica groups that were
// seen ended (ReplicaGroupPlacer::States), so that a group whose run the
// registry removed (ended_run_ttl after its end) still counts as finished
// or failed when the job's agents judge its end. Each group's agents ask
// as soon as it ends, so every end is seen. Pure domain: no gRPC. Lives in
// the leader's memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/types.h"

namespace meshrun::rendezvous {

class ReplicaGroupEnds {
 public:
  // Remembers at most `max_jobs` jobs (at least 1): past it the least
  // recently merged one is forgotten (max_replica_group_jobs).
  explicit ReplicaGroupEnds(int64_t max_jobs) : max_jobs_(max_jobs < 1 ? 1 : max_jobs) {}

  // Records the groups of `states` (the job `run_id`'s, group 0 first)
  // that ended, and gives each group the server holds no run of (kNone)
  // the end seen earlier, with its root cause. A job is remembered once
  // one of its groups is seen ended. Thread-safe; O(R), plus O(jobs
  // remembered) when a new job is remembered at the bound.
  void Merge(const std::string& run_id, std::vector<ReplicaGroupState>& states, absl::Time now);
  // Jobs remembered now (for tests).
  int64_t jobs() const;

 private:
  // One job's groups: each one's end (kNone: not seen ended) and the
  // first failed one's root cause.
  struct JobEnds {
    std::vector<ReplicaGroupState::State> ended;
    int failure_group = -1;
    std::string failure;
    absl::Time merged;
  };
  const int64_t max_jobs_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, JobEnds> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshrun::rendezvous
