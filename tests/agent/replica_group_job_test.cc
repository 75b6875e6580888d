#include <catch2/catch.hpp>

#include "agent/replica_group_job.h"

using meshrun::agent::JudgeReplicaGroups;
using meshrun::agent::ReplicaGroupJob;
using meshrun::rendezvous::ReplicaGroupState;
using State = ReplicaGroupState::State;

namespace {

ReplicaGroupState G(State s, bool has_nodes = true, std::string failure = "") {
  ReplicaGroupState g;
  g.state = s;
  g.has_nodes = has_nodes;
  g.failure = std::move(failure);
  return g;
}

}  // namespace

TEST_CASE("a job of replica groups is over only when no group with nodes forms or runs", "[replica_group_job]") {
  ReplicaGroupJob j = JudgeReplicaGroups({G(State::kFinished), G(State::kRunning), G(State::kFinished)}, 1);
  CHECK_FALSE(j.over);
  CHECK_FALSE(j.succeeded);
  CHECK(j.in_progress == 1);
  // A group re-forming after a restart is in progress too.
  CHECK_FALSE(JudgeReplicaGroups({G(State::kFinished), G(State::kJoining)}, 1).over);
  // A group with no node (none came, or all left with no standby) is not waited for.
  j = JudgeReplicaGroups({G(State::kFinished), G(State::kJoining, /*has_nodes=*/false), G(State::kNone, false)}, 1);
  CHECK(j.over);
  CHECK(j.succeeded);
  CHECK(j.finished == 1);
  // A group not formed yet is waited for while `wait_unformed` (join_timeout), and while a
  // place is held for a node on its way.
  CHECK_FALSE(JudgeReplicaGroups({G(State::kFinished), G(State::kNone, false)}, 1, /*wait_unformed=*/true).over);
  CHECK_FALSE(JudgeReplicaGroups({G(State::kFinished), G(State::kNone, /*has_nodes=*/true)}, 1).over);
}

TEST_CASE("a job of replica groups fails once fewer than --min_replica_groups are alive", "[replica_group_job]") {
  const std::vector<ReplicaGroupState> one_failed = {G(State::kRunning), G(State::kFailed, true, "rank 2 exited 1"),
                                                     G(State::kRunning)};
  ReplicaGroupJob j = JudgeReplicaGroups(one_failed, 2);
  CHECK_FALSE(j.below_min);  // 2 of 3 alive.
  j = JudgeReplicaGroups(one_failed, 3);
  CHECK(j.below_min);
  CHECK_FALSE(j.succeeded);
  CHECK(j.summary == "0 of 3 replica groups finished, 1 failed (group 1: rank 2 exited 1), 2 in progress; "
                     "--min_replica_groups=3");
}

TEST_CASE("a job of replica groups succeeds when over with at least M groups finished", "[replica_group_job]") {
  // One group failed, M = 2 finished: success, and every agent exits 0.
  ReplicaGroupJob j = JudgeReplicaGroups({G(State::kFinished), G(State::kFailed, false, "x"), G(State::kFinished)}, 2);
  CHECK(j.over);
  CHECK(j.succeeded);
  // Over with fewer finished than M (a group never formed): failed.
  j = JudgeReplicaGroups({G(State::kFinished), G(State::kNone, false)}, 2);
  CHECK(j.over);
  CHECK_FALSE(j.below_min);
  CHECK_FALSE(j.succeeded);
  // Every group failed: over, failed.
  j = JudgeReplicaGroups({G(State::kFailed, false, "a"), G(State::kFailed, false, "b")}, 1);
  CHECK(j.over);
  CHECK(j.below_min);
  CHECK_FALSE(j.succeeded);
  CHECK(j.failed == 2);
}
