// ReplicaList: what Status shows of the replicas; at once while etcd does
// not answer.
#include "rendezvous/state/etcd/replica_list.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <string>

#include "absl/time/clock.h"

namespace etcd = meshrun::rendezvous::state::etcd;
using meshrun::rendezvous::state::ReplicaView;

namespace {

// A read whose answer the test sets: the leader's address, or an error that
// comes after `delay` (etcd without quorum).
struct FakeEtcd {
  std::atomic<int> reads{0};
  std::atomic<bool> down{false};
  absl::Duration delay = absl::ZeroDuration();
  std::string leader = "10.0.0.1:29400";
  absl::StatusOr<std::vector<ReplicaView>> Read(absl::Duration) {
    ++reads;
    if (down.load()) {
      absl::SleepFor(delay);
      return absl::UnavailableError("no member answered");
    }
    return std::vector<ReplicaView>{{"a", leader, true}, {"b", "10.0.0.2:29400", false}};
  }
};

}  // namespace

TEST_CASE("the replica list is read at every call while etcd answers: never stale", "[replica_list]") {
  FakeEtcd etcd;
  etcd::ReplicaList list([&](absl::Duration t) { return etcd.Read(t); });
  REQUIRE(list.Get().at(0).address == "10.0.0.1:29400");
  etcd.leader = "10.0.0.2:29400";  // The leader changed.
  CHECK(list.Get().at(0).address == "10.0.0.2:29400");
  CHECK(etcd.reads == 2);
}

TEST_CASE("while etcd does not answer, calls get no list at once and one read goes on in the background",
          "[replica_list]") {
  FakeEtcd etcd;
  etcd.delay = absl::Milliseconds(300);
  etcd::ReplicaList list([&](absl::Duration t) { return etcd.Read(t); });
  REQUIRE(list.Get().size() == 2);
  etcd.down = true;
  CHECK(list.Get().empty());  // This call waits for the failed read once.
  for (int i = 0; i < 20; ++i) {
    const absl::Time t0 = absl::Now();
    CHECK(list.Get().empty());  // Unknown, never the old list.
    CHECK(absl::Now() - t0 < absl::Milliseconds(50));
  }
  // Reads go on one at a time (about one per 300 ms), not one per call.
  CHECK(etcd.reads <= 6);
  etcd.down = false;
  etcd.leader = "10.0.0.3:29400";
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (list.Get().empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  CHECK(list.Get().at(0).address == "10.0.0.3:29400");  // Back: read again at every call.
}

TEST_CASE("a list marked failing (its replica paused) answers at once, before any read has failed",
          "[replica_list]") {
  FakeEtcd etcd;
  etcd.delay = absl::Milliseconds(300);
  etcd::ReplicaList list([&](absl::Duration t) { return etcd.Read(t); });
  REQUIRE(list.Get().size() == 2);
  etcd.down = true;
  list.MarkFailing();
  const absl::Time t0 = absl::Now();
  CHECK(list.Get().empty());
  CHECK(absl::Now() - t0 < absl::Milliseconds(50));
  etcd.down = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (list.Get().empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  CHECK(list.Get().size() == 2);  // The background read worked: read at every call again.
}

TEST_CASE("a list marked answering (etcd answered its replica again) reads at the next call, not after the "
          "background read's timeout",
          "[replica_list]") {
  FakeEtcd etcd;
  etcd.delay = absl::Seconds(1);  // A read while down hangs, as one sent while cut off does.
  etcd::ReplicaList list([&](absl::Duration t) { return etcd.Read(t); });
  REQUIRE(list.Get().size() == 2);
  etcd.down = true;
  list.MarkFailing();
  CHECK(list.Get().empty());
  etcd.down = false;
  list.MarkAnswering();
  const absl::Time t0 = absl::Now();
  CHECK(list.Get().size() == 2);  // Read by the call itself: the background read still hangs.
  CHECK(absl::Now() - t0 < absl::Milliseconds(500));
}
