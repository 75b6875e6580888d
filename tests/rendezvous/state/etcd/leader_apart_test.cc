// LeaderApart (rendezvous/state/etcd/leader_apart.h): the leading replica
// moves etcd's own leader off its host's member, against a real 3-member
// etcd; and which member is "on this host" (--state_local_member).
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "common/net.h"
#include "rendezvous/state/etcd/client/etcd_client.h"
#include "rendezvous/state/etcd/leader_apart.h"
#include "tests/rendezvous/state/etcd/etcd_test_util.h"
#include "tests/support/etcd_cluster.h"

using meshrun::Endpoint;
using meshrun::testing::EtcdCluster;
using meshrun::testing::TestClient;
using meshrun::testing::TestClientOptions;
using meshrun::testing::WaitFor;
namespace etcd = meshrun::rendezvous::state::etcd;

TEST_CASE("etcd leader apart: the member on this host is the first local one, none, or the one named",
          "[etcd_leader_apart]") {
  // Documentation addresses (TEST-NET-2 and -3), not this machine's (checked).
  REQUIRE_FALSE(meshrun::IsLocalHost("203.0.113.77"));
  REQUIRE_FALSE(meshrun::IsLocalHost("198.51.100.77"));
  const std::vector<Endpoint> members = {{"203.0.113.77", 2379}, {"127.0.0.1", 2380}, {"localhost", 2381}};
  absl::StatusOr<std::optional<Endpoint>> a = etcd::LocalMember("auto", members);
  REQUIRE(a.ok());
  REQUIRE(a->has_value());
  CHECK((*a)->ToString() == "127.0.0.1:2380");
  CHECK(etcd::LocalMember("", members)->value().port == 2380);
  CHECK_FALSE(etcd::LocalMember("auto", {{"203.0.113.77", 2379}, {"198.51.100.77", 2379}})->has_value());
  CHECK_FALSE(etcd::LocalMember("none", members)->has_value());
  absl::StatusOr<std::optional<Endpoint>> named = etcd::LocalMember("203.0.113.77:2379", members);
  REQUIRE(named.ok());
  CHECK((*named)->host == "203.0.113.77");
  absl::StatusOr<std::optional<Endpoint>> bad = etcd::LocalMember("10.0.0.1:2379", members);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.status().message()) ==
        "--state_local_member=10.0.0.1:2379 is not one of --state's members; allowed: auto, none, or one of "
        "203.0.113.77:2379, 127.0.0.1:2380, localhost:2381");
}

TEST_CASE("etcd leader apart: etcd's leader on this host's member is moved to another member, once",
          "[etcd][etcd_leader_apart]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  auto client = TestClient(TestClientOptions(cluster, {0, 1, 2}));
  REQUIRE(client != nullptr);
  const Endpoint local = TestClientOptions(cluster, {0}).members.at(0);

  // No member of this host: nothing is asked.
  etcd::LeaderApart nowhere(client.get(), std::nullopt, absl::Seconds(1));
  CHECK(nowhere.Check(true) == etcd::LeaderApart::Outcome::kIdle);

  REQUIRE_MSG(cluster.MoveLeader(0), cluster.error());
  REQUIRE(cluster.LeaderIndex() == 0);
  etcd::LeaderApart apart(client.get(), local, absl::Seconds(1));
  CHECK(apart.Check(/*force=*/true) == etcd::LeaderApart::Outcome::kMoved);
  // Every member agrees on a leader that is not member 0.
  REQUIRE(WaitFor(
      [&] {
        const int l = cluster.LeaderIndex(1);
        return l == 1 || l == 2;
      },
      10));
  // Apart now; and not asked again within the interval.
  CHECK(apart.Check(true) == etcd::LeaderApart::Outcome::kApart);
  CHECK(apart.Check() == etcd::LeaderApart::Outcome::kIdle);

  // etcd's leader comes back to this host's member (etcd re-elects, or an
  // operator moves it): moved off again at the next check.
  REQUIRE_MSG(cluster.MoveLeader(0), cluster.error());
  CHECK(apart.Check(true) == etcd::LeaderApart::Outcome::kMoved);
  REQUIRE(WaitFor([&] { return cluster.LeaderIndex(1) > 0; }, 10));

  // This host's member dead: the check fails (and is tried again later,
  // backing off: not within twice the interval); nothing hangs past the
  // client's timeouts.
  cluster.Kill(0);
  CHECK(apart.Check(true) == etcd::LeaderApart::Outcome::kFailed);
  CHECK(apart.Check() == etcd::LeaderApart::Outcome::kIdle);
}

TEST_CASE("etcd leader apart: a one-member etcd has nowhere to move its leader", "[etcd][etcd_leader_apart]") {
  MESHRUN_REQUIRE_ETCD();
  meshrun::testing::EtcdClusterOptions o;
  o.members = 1;
  EtcdCluster cluster(o);
  REQUIRE_MSG(cluster.Start(), cluster.error());
  auto client = TestClient(TestClientOptions(cluster));
  REQUIRE(client != nullptr);
  etcd::LeaderApart apart(client.get(), TestClientOptions(cluster).members.at(0), absl::Seconds(1));
  CHECK(apart.Check(true) == etcd::LeaderApart::Outcome::kAlone);
  CHECK(cluster.LeaderIndex() == 0);
}
