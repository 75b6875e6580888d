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
  auto p = PlanQuorum(Three(50, 0, 50), "1:3", 2);
  REQUIRE(p.ok());
  CHECK(p->replica_rank == 1);
  CHECK(p->replica_world_size == 3);
  CHECK(p->max_step == 50);
  CHECK(p->heal_source == 0);  // The first at the highest step.
  CHECK(p->anyone_behind);
  CHECK(p->behind);
  auto healthy = PlanQuorum(Three(50, 0, 50), "2:0", 2);
  REQUIRE(healthy.ok());
  CHECK(healthy->anyone_behind);
  CHECK_FALSE(healthy->behind);
  auto source_later = PlanQuorum(Three(3, 9, 9), "0:0", 2);
  REQUIRE(source_later.ok());
  CHECK(source_later->heal_source == 1);
  CHECK(source_later->behind);
  auto even = PlanQuorum(Three(4, 4, 4), "0:0", 2);
  REQUIRE(even.ok());
  CHECK_FALSE(even->anyone_behind);
}

TEST_CASE("quorum plan: a group left out, or of another size, is refused", "[ft]") {
  auto out = PlanQuorum(Three(1, 1, 1), "3:0", 2);
  CHECK(absl::IsFailedPrecondition(out.status()));
  CHECK(absl::StrContains(out.status().message(), "does not include replica group '3:0'"));
  Quorum q = Three(1, 1, 1);
  q.participants[2].world_size = 4;
  auto mixed = PlanQuorum(q, "0:0", 2);
  CHECK(absl::IsFailedPrecondition(mixed.status()));
  CHECK(absl::StrContains(mixed.status().message(), "replica group '2:0' has 4 ranks and this one 2"));
}

TEST_CASE("quorum plan: the group store's text form round-trips a quorum and an error", "[ft]") {
  Quorum q = Three(5, 0, 5);
  q.participants[1].replica_id = "odd id\nwith spaces";
  auto back = DecodeQuorum(EncodeQuorum(q));
  REQUIRE(back.ok());
  CHECK(back->quorum_id == 7);
  REQUIRE(back->participants.size() == 3);
  CHECK(back->participants[1].replica_id == "odd id\nwith spaces");
  CHECK(back->participants[2].step == 5);
  CHECK(back->participants[2].world_size == 2);
  auto err = DecodeQuorum(EncodeQuorum(absl::DeadlineExceededError("no quorum\nin 60s")));
  CHECK(absl::IsDeadlineExceeded(err.status()));
  CHECK(err.status().message() == "no quorum\nin 60s");
  CHECK(absl::IsInternal(DecodeQuorum("garbage").status()));
  CHECK(absl::IsInternal(DecodeQuorum("ok 3\n1 2\n").status()));
}
