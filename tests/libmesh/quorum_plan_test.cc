// What a quorum means for one replica group (libmesh/ft/quorum_plan.h), and
// its text form in the group's store.
#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "ft/quorum_plan.h"

using namespace meshrun::mesh::ft;

namespace {

Quorum Three(int64_t s0, int64_t s1, int64_t s2) {
  return Quorum{7, {{"0:0", s0, 2}, {"1:3", s1, 2}, {"2:0", s2, 2}}};
}

}  // namespace

TEST_CASE("quorum plan: place, highest step, who heals from whom", "[ft]") {
  auto p = PlanQuorum(Three(50, 0, 50), "1:3");
  REQUIRE(p.ok());
  CHECK(p->replica_rank == 1);
  CHECK(p->replica_world_size == 3);
  CHECK(p->max_step == 50);
  CHECK(p->heal_source == 0);  // The first at the highest step.
  CHECK(p->anyone_behind);
  CHECK(p->behind);
  auto healthy = PlanQuorum(Three(50, 0, 50), "2:0");
  REQUIRE(healthy.ok());
  CHECK(healthy->anyone_behind);
  CHECK_FALSE(healthy->behind);
  auto source_later = PlanQuorum(Three(3, 9, 9), "0:0");
  REQUIRE(source_later.ok());
  CHECK(source_later->heal_source == 1);
  CHECK(source_later->behind);
  auto even = PlanQuorum(Three(4, 4, 4), "0:0");
  REQUIRE(even.ok());
  CHECK_FALSE(even->anyone_behind);
}

TEST_CASE("quorum plan: a group not in the quorum is refused, groups of another size are left out", "[ft]") {
  auto out = PlanQuorum(Three(1, 1, 1), "3:0");
  CHECK(absl::IsFailedPrecondition(out.status()));
  CHECK(absl::StrContains(out.status().message(), "does not include replica group '3:0'"));
  Quorum q = Three(1, 1, 5);
  q.participants[2].world_size = 4;  // "2:0" has 4 ranks, the two others 2.
  auto kept = PlanQuorum(q, "1:3");
  REQUIRE(kept.ok());
  CHECK(kept->members == std::vector<int>{0, 1});
  CHECK(kept->left_out == std::vector<std::string>{"2:0"});
  CHECK(kept->replica_rank == 1);
  CHECK(kept->replica_world_size == 2);
  CHECK(kept->max_step == 1);  // Over the members only.
  CHECK_FALSE(kept->anyone_behind);
  auto odd = PlanQuorum(q, "2:0");
  CHECK(absl::IsFailedPrecondition(odd.status()));
  CHECK(absl::StrContains(odd.status().message(), "('2:0') has 4 ranks, and 2 of the quorum's 3 groups have 2"));
  // A tie: the first participant's size is taken.
  Quorum tie{9, {{"a", 0, 2}, {"b", 0, 4}}};
  CHECK(PlanQuorum(tie, "a").ok());
  CHECK(absl::IsFailedPrecondition(PlanQuorum(tie, "b").status()));
}

TEST_CASE("quorum plan: a failed step anywhere changes the row epoch", "[ft]") {
  Quorum q = Three(5, 5, 5);
  auto before = PlanQuorum(q, "0:0");
  REQUIRE(before.ok());
  q.participants[1].commit_failures = 1;  // Group 1's last step failed: same groups, same id.
  auto after = PlanQuorum(q, "0:0");
  REQUIRE(after.ok());
  CHECK(after->row_epoch == before->row_epoch + 1);
}

TEST_CASE("quorum plan: the group store's text form round-trips a quorum and an error", "[ft]") {
  Quorum q = Three(5, 0, 5);
  q.participants[1].replica_id = "odd id\nwith spaces";
  q.participants[1].commit_failures = 3;
  auto back = DecodeQuorum(EncodeQuorum(q));
  REQUIRE(back.ok());
  CHECK(back->quorum_id == 7);
  REQUIRE(back->participants.size() == 3);
  CHECK(back->participants[1].replica_id == "odd id\nwith spaces");
  CHECK(back->participants[1].commit_failures == 3);
  CHECK(back->participants[2].step == 5);
  CHECK(back->participants[2].world_size == 2);
  CHECK(back->participants[0].commit_failures == 0);
  auto err = DecodeQuorum(EncodeQuorum(absl::DeadlineExceededError("no quorum\nin 60s")));
  CHECK(absl::IsDeadlineExceeded(err.status()));
  CHECK(err.status().message() == "no quorum\nin 60s");
  CHECK(absl::IsInternal(DecodeQuorum("garbage").status()));
  CHECK(absl::IsInternal(DecodeQuorum("ok 3\n1 2\n").status()));
  CHECK(absl::IsInternal(DecodeQuorum("ok 3\n1 2 x id\n").status()));
}
