// A replica's terms and its view of who leads, on a real 3-member etcd
// (tests/support/etcd_cluster.h): a term that ended while its state loaded
// never opens the gate later (issue 30, 3), and the leader observer outlives
// a compaction of etcd's history (issue 30, 4).
#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/logging.h"
#include "rendezvous/state/etcd/client/etcd_options.h"
#include "rendezvous/state/etcd/election.h"
#include "rendezvous/state/etcd/replica.h"
#include "rendezvous/state/serving_gate.h"
#include "spdlog/sinks/base_sink.h"
#include "tests/rendezvous/state/etcd/etcd_test_util.h"

using namespace meshrun::testing;
namespace state = ::meshrun::rendezvous::state;

namespace {

// The lines logged to the "rdzv" logger while it lives: what a replica and
// its election did (deposed, paused, resumed) is told there first.
class LogLines : public spdlog::sinks::base_sink<std::mutex> {
 public:
  int Count(const std::string& part) const {
    std::lock_guard<std::mutex> lock(lines_mu_);
    int n = 0;
    for (const std::string& l : lines_) n += l.find(part) != std::string::npos;
    return n;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::lock_guard<std::mutex> lock(lines_mu_);
    lines_.emplace_back(msg.payload.data(), msg.payload.size());
  }
  void flush_() override {}

 private:
  mutable std::mutex lines_mu_;
  std::vector<std::string> lines_;
};

// Adds a LogLines to the "rdzv" logger for the test's span (before any
// thread logs, after every one is gone).
struct CapturedLog {
  std::shared_ptr<LogLines> lines = std::make_shared<LogLines>();
  CapturedLog() { meshrun::Logger("rdzv")->sinks().push_back(lines); }
  ~CapturedLog() {
    auto& sinks = meshrun::Logger("rdzv")->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), lines), sinks.end());
  }
};

}  // namespace

TEST_CASE("etcd replica: a term deposed while its state loads never counts as loaded, not even after a pause",
          "[etcd][replica]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  CapturedLog log;
  state::ServingGate gate;
  std::atomic<int> loads{0};     // on_lead calls (one per term's load).
  std::atomic<int> released{0};  // on_lead calls allowed to return.
  state::etcd::ReplicaHooks hooks;
  hooks.on_lead = [&](const std::vector<state::RunRecord>&, const state::etcd::Takeover&) {
    const int n = ++loads;
    WaitFor([&] { return released.load() >= n; }, 60);
  };
  state::etcd::ReplicaOptions ro;
  absl::StatusOr<state::etcd::Url> url = state::etcd::ParseUrl(cluster.Url("/replica-test"));
  REQUIRE(url.ok());
  ro.connection.url = *url;
  ro.connection.client = TestClientOptions(cluster);  // Member 0 first.
  ro.id = "A";
  ro.lease_ttl_s = 1;
  ro.local_member = "none";
  absl::StatusOr<std::unique_ptr<state::etcd::Replica>> replica = state::etcd::Replica::Start(ro, &gate, hooks);
  REQUIRE_MSG(replica.ok(), replica.status().message());
  // The replica's threads stop (and the held load returns) before the gate goes.
  struct Stop {
    std::atomic<int>& released;
    std::unique_ptr<state::etcd::Replica>& r;
    ~Stop() {
      released = 1000;
      r.reset();
    }
  } stop{released, *replica};
  REQUIRE((*replica)->Campaign("127.0.0.1:1").ok());
  REQUIRE(WaitFor([&] { return loads.load() == 1; }, 10));  // Term 1 loads.

  // Deposed while it loads: its election key deleted (as its lease's end would).
  auto admin = TestClient(TestClientOptions(cluster, {1, 2, 0}));
  REQUIRE(admin);
  REQUIRE(admin->DeletePrefix("/replica-test/election/").ok());
  REQUIRE(WaitFor([&] { return log.lines->Count("etcd election: the election key") == 1; }, 10));
  released = 1;  // Term 1's load ends after its term.
  // The only candidate, it leads again at once: term 2 loads.
  REQUIRE(WaitFor([&] { return loads.load() == 2; }, 20));
  CHECK_FALSE(gate.serving());

  // A pause and its end while term 2 loads: etcd's quorum lost (members 1
  // and 2; the replica talks to member 0), then back.
  cluster.Kill(1);
  cluster.Kill(2);
  REQUIRE(WaitFor([&] { return log.lines->Count("etcd election: leadership paused") == 1; }, 10));
  REQUIRE(cluster.Restart(1));
  REQUIRE(cluster.Restart(2));
  REQUIRE_MSG(cluster.WaitHealthy(20), cluster.error());
  REQUIRE(WaitFor([&] { return log.lines->Count("etcd election: leadership resumed") == 1; }, 20));
  // The resumption does not open the gate while term 2's state is not
  // restored (a term-1 `loaded` opened it at once: watched for 1 s).
  CHECK_FALSE(WaitFor([&] { return gate.serving(); }, 1.0));
  released = 2;
  CHECK(WaitFor([&] { return gate.serving(); }, 10));
}

TEST_CASE("etcd leader observer: a watch ended by a compaction of etcd's history is started again", "[etcd][replica]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  CapturedLog log;
  auto observing = TestClient(TestClientOptions(cluster, {0, 1, 2}));  // Its watch on member 0.
  auto admin = TestClient(TestClientOptions(cluster, {1, 2, 0}));
  auto candidates = TestClient(TestClientOptions(cluster, {2, 1, 0}));
  REQUIRE((observing && admin && candidates));
  state::etcd::ElectionOptions eo;
  eo.prefix = "/observer-test/election/";
  eo.lease_ttl_s = 1;
  state::etcd::Election observed(observing.get(), eo);
  std::mutex seen_mu;
  std::vector<std::string> seen;  // Each leader reported, "" for none.
  auto leader_seen = [&](const std::string& v) {
    std::lock_guard<std::mutex> lock(seen_mu);
    return !seen.empty() && seen.back() == v;
  };
  std::unique_ptr<state::etcd::LeaderObserver> observer =
      observed.Observe([&](const std::optional<state::etcd::LeaderInfo>& l) {
        std::lock_guard<std::mutex> lock(seen_mu);
        seen.push_back(l ? l->value : "");
      });
  state::etcd::Election a(candidates.get(), eo);
  REQUIRE(a.Campaign("A", "a", {}).ok());
  REQUIRE(WaitFor([&] { return leader_seen("a"); }, 10));

  // History compacted past the watch's revision (other keys written since),
  // then its stream broken: it can only be re-established from a revision
  // etcd no longer has, and etcd ends it for good.
  absl::StatusOr<state::etcd::PutResult> put;
  for (int i = 0; i < 3; ++i) put = admin->Put("/observer-test/other", std::to_string(i));
  REQUIRE(put.ok());
  REQUIRE(admin->Compact(put->revision).ok());
  cluster.Kill(0);
  REQUIRE(WaitFor([&] { return log.lines->Count("etcd compacted its history") >= 1; }, 20));

  // Leaders change after the compaction: each is still reported.
  REQUIRE(a.Resign().ok());
  REQUIRE(WaitFor([&] { return leader_seen(""); }, 10));
  state::etcd::Election b(candidates.get(), eo);
  REQUIRE(b.Campaign("B", "b", {}).ok());
  CHECK(WaitFor([&] { return leader_seen("b"); }, 10));
  observer.reset();
}
