// The etcd client (rendezvous/state/etcd/client/etcd_client.h) while etcd
// elects its own leader: members answer "no leader" for one to two election
// timeouts (longer on a loaded machine), and a call rides that out within
// its call_timeout instead of failing after its first rounds.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <future>
#include <string>

#include "absl/status/status.h"
#include "rendezvous/state/etcd/client/etcd_client.h"
#include "tests/rendezvous/state/etcd/etcd_test_util.h"
#include "tests/support/etcd_cluster.h"

using meshrun::testing::EtcdCluster;
using meshrun::testing::SecondsSince;
using meshrun::testing::TestClient;
using meshrun::testing::TestClientOptions;
using meshrun::testing::WaitFor;
namespace etcd = meshrun::rendezvous::state::etcd;
using Clock = std::chrono::steady_clock;

TEST_CASE("etcd: a write refused with 'no leader' for over a second succeeds once etcd has a leader again, "
          "within call_timeout", "[etcd]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  etcd::ClientOptions o = TestClientOptions(cluster, {0, 1, 2});
  o.call_timeout = absl::Seconds(10);
  auto client = TestClient(o);
  REQUIRE(client != nullptr);
  REQUIRE(client->Put("/w/before", "1").ok());

  // No quorum: member 0 alone, and it knows it has no leader.
  cluster.Kill(1);
  cluster.Kill(2);
  REQUIRE(WaitFor([&] { return cluster.LeaderSeenBy(0, 0.5) == 0; }, 5));

  // A write sent now is refused "no leader" by member 0 (never applied, so
  // safe to send again) and finds no other member. It must still be trying
  // when the quorum comes back 1.5 s later (the duration is what is tested:
  // more than the first three rounds of tries, 0.7 s), and then succeed.
  const auto t0 = Clock::now();
  std::future<absl::Status> put =
      std::async(std::launch::async, [&] { return client->Put("/w/during", "2").status(); });
  const bool ended_early = put.wait_for(std::chrono::milliseconds(1500)) == std::future_status::ready;
  REQUIRE(cluster.Restart(1));
  const absl::Status s = put.get();
  const double took = SecondsSince(t0);
  std::printf("etcd election wait: a write sent without a leader ended after %.3f s: %s\n", took,
              s.ok() ? "OK" : std::string(s.message()).c_str());
  INFO(s.message() << " (" << took << " s)");
  CHECK_FALSE(ended_early);
  REQUIRE(s.ok());
  CHECK(took < absl::ToDoubleSeconds(o.call_timeout) + 1.0);
  absl::StatusOr<etcd::RangeResult> r = client->Get("/w/during");
  REQUIRE(r.ok());
  REQUIRE(r->kvs.size() == 1);
  CHECK(r->kvs.front().value == "2");
}
