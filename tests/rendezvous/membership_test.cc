// Membership (rendezvous/run/membership.h): credentials, the replaced
// credentials' grace, lost nodes, and the memory budget's charge.
#include <catch2/catch.hpp>

#include "rendezvous/policy/memory_budget.h"
#include "rendezvous/run/membership.h"

using namespace meshrun::rendezvous;

TEST_CASE("membership: a node is admitted with its own credential, checked in full", "[membership]") {
  Membership m("job", nullptr);
  CHECK_FALSE(m.Knows("a"));
  absl::Status unknown = m.Check("a", "anything");
  CHECK(unknown.code() == absl::StatusCode::kPermissionDenied);
  CHECK(std::string(unknown.message()).find("node 'a' is not a member of run 'job'") != std::string::npos);
  REQUIRE(m.Admit("a", "ipv4:10.0.0.1:5000", Claimant::kMember).ok());
  REQUIRE(m.Admit("b", "", Claimant::kOther).ok());
  const Membership::Node* a = m.Find("a");
  REQUIRE(a != nullptr);
  CHECK(a->session.size() == 32);
  CHECK(a->peer == "ipv4:10.0.0.1:5000");
  CHECK(a->last_seen == absl::InfinitePast());
  CHECK(a->session != m.Find("b")->session);
  CHECK(m.Check("a", a->session).ok());
  absl::Status wrong = m.Check("a", m.Find("b")->session);
  CHECK(wrong.code() == absl::StatusCode::kPermissionDenied);
  CHECK(std::string(wrong.message()).find("wrong session credential for node 'a'") != std::string::npos);
  CHECK(m.Check("a", "").code() == absl::StatusCode::kPermissionDenied);
  const absl::Time t = absl::FromUnixSeconds(1000);
  m.Touch("a", t);
  m.Touch("nobody", t);  // No-op.
  CHECK(m.LastSeen("a") == t);
  CHECK(m.LastSeen("nobody") == absl::InfinitePast());
  CHECK(m.size() == 2);
  m.Forget("b");
  CHECK_FALSE(m.Knows("b"));
  CHECK(m.size() == 1);
}

TEST_CASE("membership: a round close renews credentials, and the replaced ones last only their grace",
          "[membership]") {
  Membership m("job", nullptr);
  REQUIRE(m.Admit("a", "", Claimant::kMember).ok());
  REQUIRE(m.Admit("b", "", Claimant::kMember).ok());
  const std::string old_a = m.Find("a")->session;
  const std::string old_b = m.Find("b")->session;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  std::vector<std::string> fresh = m.RenewCredentials({"b", "a"}, t0 + absl::Seconds(10));
  REQUIRE(fresh.size() == 2);
  CHECK(fresh[0] == m.Find("b")->session);
  CHECK(fresh[1] == m.Find("a")->session);
  CHECK(fresh[1] != old_a);
  CHECK_FALSE(m.Check("a", old_a).ok());
  CHECK(m.Check("a", fresh[1]).ok());
  CHECK(m.AcceptsPrevious("a", old_a, t0));
  CHECK_FALSE(m.AcceptsPrevious("a", old_b, t0));  // Another node's.
  CHECK_FALSE(m.AcceptsPrevious("a", fresh[1], t0));  // The current one is not "previous".
  // A second close replaces the kept ones: only the credentials it replaced count.
  std::vector<std::string> again = m.RenewCredentials({"a"}, t0 + absl::Seconds(10));
  CHECK_FALSE(m.AcceptsPrevious("a", old_a, t0));
  CHECK(m.AcceptsPrevious("a", fresh[1], t0));
  CHECK_FALSE(m.AcceptsPrevious("b", old_b, t0));
  // Past the grace: refused, and dropped.
  CHECK_FALSE(m.AcceptsPrevious("a", fresh[1], t0 + absl::Seconds(10)));
  CHECK_FALSE(m.AcceptsPrevious("a", fresh[1], t0));
  m.RenewCredentials({"a"}, t0 + absl::Seconds(10));
  m.DropPreviousIfPast(t0);
  CHECK(m.AcceptsPrevious("a", again[0], t0));
  m.DropPrevious();
  CHECK_FALSE(m.AcceptsPrevious("a", again[0], t0));
}

TEST_CASE("membership: lost nodes stay known and counted, also after Release", "[membership]") {
  Membership m("job", nullptr);
  REQUIRE(m.Admit("a", "", Claimant::kMember).ok());
  REQUIRE(m.Admit("b", "", Claimant::kMember).ok());
  m.MarkLost("a");
  CHECK(m.IsLost("a"));
  CHECK_FALSE(m.IsLost("b"));
  CHECK(m.Knows("a"));
  CHECK(m.lost_count() == 1);
  m.Compact();
  CHECK(m.Knows("a"));
  CHECK(m.Knows("b"));
  m.Release();
  CHECK(m.size() == 0);
  CHECK_FALSE(m.IsLost("a"));
  CHECK(m.lost_count() == 1);
}

TEST_CASE("membership: every known node is charged to the memory budget, and given back", "[membership]") {
  MemoryBudget budget(/*limit=*/kNodeCost * 3, /*member_reserve=*/kNodeCost);
  {
    Membership m("job", &budget);
    REQUIRE(m.Admit("a", "", Claimant::kOther).ok());
    REQUIRE(m.Admit("b", "", Claimant::kOther).ok());
    CHECK(budget.held(HeldKind::kNode) == 2 * kNodeCost);
    // The last kNodeCost is members' only.
    absl::Status refused = m.Admit("c", "", Claimant::kOther);
    CHECK(refused.code() == absl::StatusCode::kResourceExhausted);
    CHECK_FALSE(m.Knows("c"));
    CHECK(m.Admit("c", "", Claimant::kMember).ok());
    CHECK(budget.held(HeldKind::kNode) == 3 * kNodeCost);
    m.Forget("a");
    CHECK(budget.held(HeldKind::kNode) == 2 * kNodeCost);
    // Restored (etcd holds it): charged, even past the budget, once per node.
    m.Restore("d", "secret", absl::InfinitePast());
    m.Restore("e", "secret", absl::InfinitePast());
    m.Restore("d", "secret2", absl::InfinitePast());
    CHECK(budget.held(HeldKind::kNode) == 4 * kNodeCost);
    CHECK(budget.held() > budget.limit());
    CHECK(m.Check("d", "secret2").ok());
    m.Forget("e");
    CHECK(budget.held(HeldKind::kNode) == 3 * kNodeCost);
  }
  CHECK(budget.held(HeldKind::kNode) == 0);
  {
    Membership m("job", &budget);
    REQUIRE(m.Admit("a", "", Claimant::kMember).ok());
    m.Release();
    CHECK(budget.held(HeldKind::kNode) == 0);
  }
  CHECK(budget.held() == 0);
}
