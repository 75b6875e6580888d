// How a job of replica groups stands (meshrun --replica_groups=R
// --min_replica_groups=M), judged from its groups' states
// (ReplicaGroupPlacer::States, through the server's ReplicaGroupStates).
// Pure: no I/O.
//
// A group is alive while its run has not failed. A group is in progress
// while its run forms or runs with a node taking part (or a place held for
// one); a group the server holds no run of (none of its nodes came yet) is
// in progress only while `wait_unformed`; a group whose nodes all left with
// no standby coming is not waited for. The job is over when no group is in
// progress: the exit
// barrier across the groups. It fails once fewer than M groups are alive
// (below_min: the agents of the groups still running fail theirs), and
// when it is over with fewer than M groups finished; else it succeeded.
#pragma once

#include <string>
#include <vector>

#include "proto/types.h"

namespace meshrun::agent {

struct ReplicaGroupJob {
  int groups = 0;       // R.
  int finished = 0;
  int failed = 0;
  int in_progress = 0;
  bool over = false;       // No group in progress.
  bool below_min = false;  // Fewer than M groups alive: the job fails.
  bool succeeded = false;  // Over, with at least M groups finished.
  // One line for the agents' messages: "2 of 3 replica groups finished,
  // 1 failed (group 1: <root cause>), 0 in progress; --min_replica_groups=2".
  std::string summary;
};

// Judges `groups` (group 0 first) against `min_groups` (M, >= 1); with
// `wait_unformed`, a group with no run yet is in progress (the agents wait
// for it up to join_timeout). Thread-safe (pure).
ReplicaGroupJob JudgeReplicaGroups(const std::vector<rendezvous::ReplicaGroupState>& groups, int min_groups,
                                   bool wait_unformed = false);

}  // namespace meshrun::agent
