#include "agent/replica_group_job.h"

#include "absl/strings/str_cat.h"

namespace meshrun::agent {

ReplicaGroupJob JudgeReplicaGroups(const std::vector<rendezvous::ReplicaGroupState>& groups, int min_groups,
                                   bool wait_unformed) {
  using State = rendezvous::ReplicaGroupState::State;
  ReplicaGroupJob j;
  j.groups = static_cast<int>(groups.size());
  std::string first_failure;
  for (size_t g = 0; g < groups.size(); ++g) {
    const rendezvous::ReplicaGroupState& s = groups[g];
    if (s.state == State::kFinished) {
      ++j.finished;
    } else if (s.state == State::kFailed) {
      if (j.failed++ == 0) first_failure = absl::StrCat("group ", g, ": ", s.failure.substr(0, 300));
    } else if ((s.state == State::kJoining || s.state == State::kRunning) && s.has_nodes) {
      ++j.in_progress;
    } else if (s.state == State::kNone && (s.has_nodes || wait_unformed)) {
      ++j.in_progress;  // Not formed yet: its nodes are on their way.
    }
  }
  j.over = j.in_progress == 0;
  j.below_min = j.groups - j.failed < min_groups;
  j.succeeded = j.over && !j.below_min && j.finished >= min_groups;
  j.summary = absl::StrCat(j.finished, " of ", j.groups, " replica groups finished, ", j.failed, " failed",
                           first_failure.empty() ? "" : absl::StrCat(" (", first_failure, ")"), ", ", j.in_progress,
                           " in progress; --min_replica_groups=", min_groups);
  return j;
}

}  // namespace meshrun::agent
