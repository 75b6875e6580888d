// The group-commit writer (rendezvous/state/etcd/store_writer.h) on a real
// 3-member etcd: many callers' writes share transactions and each is in etcd
// as written; a failed transaction fails every write behind it and the
// writer refuses more until Reset; the queue's bound; Stop waits for the
// transaction in flight.
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "rendezvous/state/etcd/election.h"
#include "rendezvous/state/etcd/store_writer.h"
#include "tests/rendezvous/state/etcd/etcd_test_util.h"

using namespace meshrun::testing;

namespace {

// A leader of a fresh election under `prefix`.
struct Leader {
  explicit Leader(etcd::Client* client, const std::string& prefix) : election(client, Options(prefix)) {
    REQUIRE(election.Campaign("A", "10.0.0.1:29400", {}).ok());
    REQUIRE(WaitFor([&] { return election.IsLeader(); }, 5));
  }
  static etcd::ElectionOptions Options(const std::string& prefix) {
    etcd::ElectionOptions o;
    o.prefix = prefix;
    o.lease_ttl_s = 2;
    return o;
  }
  etcd::Election election;
};

// Outcomes of submitted writes, counted.
struct Outcomes {
  std::mutex mu;
  int ok = 0;
  std::vector<absl::Status> failed;
  absl::AnyInvocable<void(absl::Status)> Callback() {
    return [this](absl::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      if (s.ok()) {
        ++ok;
      } else {
        failed.push_back(std::move(s));
      }
    };
  }
  int answered() {
    std::lock_guard<std::mutex> lock(mu);
    return ok + static_cast<int>(failed.size());
  }
};

etcd::StoreWriter::Write PutWrite(std::string key, std::string value, absl::AnyInvocable<void(absl::Status)> done) {
  etcd::StoreWriter::Write w;
  w.ops.push_back(etcd::Op::Put(std::move(key), std::move(value)));
  w.done = std::move(done);
  return w;
}

}  // namespace

TEST_CASE("group commit: 1,000 writes from 8 threads share few transactions, and each is in etcd as written",
          "[etcd][writer]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  auto client = TestClient(TestClientOptions(cluster));
  auto reader = TestClient(TestClientOptions(cluster, {2, 1, 0}));
  REQUIRE((client && reader));
  Leader leader(client.get(), "/gc/election/");
  etcd::StoreWriter writer(&leader.election);
  Outcomes outcomes;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 125;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string name = absl::StrCat(t, "-", i);
        REQUIRE(writer.Submit(PutWrite("/gc/k/" + name, "v" + name, outcomes.Callback())).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  REQUIRE(WaitFor([&] { return outcomes.answered() == kThreads * kPerThread; }, 30));
  CHECK(outcomes.ok == kThreads * kPerThread);
  const etcd::StoreWriter::Stats stats = writer.stats();
  std::printf("group commit: %d writes in %lld transactions\n", kThreads * kPerThread,
              static_cast<long long>(stats.transactions));
  CHECK(stats.writes == kThreads * kPerThread);
  CHECK(stats.transactions < kThreads * kPerThread / 4);  // Shared: far fewer transactions than writes.
  etcd::RangeOptions o;
  o.range_end = etcd::PrefixEnd("/gc/k/");
  absl::StatusOr<etcd::RangeResult> all = reader->Get("/gc/k/", o);
  REQUIRE(all.ok());
  REQUIRE(all->kvs.size() == static_cast<size_t>(kThreads * kPerThread));
  for (const etcd::KeyValue& kv : all->kvs) CHECK(kv.value == "v" + kv.key.substr(6));

  // One key written 200 times in a row (a counter's adds): whatever shares a
  // transaction, etcd ends with the last value.
  Outcomes counter;
  for (int i = 1; i <= 200; ++i) REQUIRE(writer.Submit(PutWrite("/gc/counter", std::to_string(i), counter.Callback())).ok());
  REQUIRE(WaitFor([&] { return counter.answered() == 200; }, 30));
  CHECK(counter.ok == 200);
  absl::StatusOr<etcd::RangeResult> c = reader->Get("/gc/counter");
  REQUIRE((c.ok() && c->kvs.size() == 1));
  CHECK(c->kvs.front().value == "200");
}

TEST_CASE("group commit: a failed transaction fails every write behind it, and the writer refuses until Reset",
          "[etcd][writer]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  auto client = TestClient(TestClientOptions(cluster));
  auto reader = TestClient(TestClientOptions(cluster, {2, 1, 0}));
  REQUIRE((client && reader));
  Leader leader(client.get(), "/gcf/election/");
  etcd::StoreWriter writer(&leader.election);
  Outcomes first;
  REQUIRE(writer.Submit(PutWrite("/gcf/k/before", "1", first.Callback())).ok());
  REQUIRE(WaitFor([&] { return first.answered() == 1; }, 10));
  REQUIRE(first.ok == 1);

  // No longer the leader: its fenced transactions fail.
  REQUIRE(leader.election.Resign().ok());
  Outcomes failed;
  for (int i = 0; i < 50; ++i) {
    absl::Status s = writer.Submit(PutWrite(absl::StrCat("/gcf/k/after", i), "x", failed.Callback()));
    if (!s.ok()) {
      // Refused once an earlier one failed: never answered, nothing queued.
      CHECK(i > 0);
      CHECK(std::string(s.message()).find("could not be saved") != std::string::npos);
      break;
    }
  }
  REQUIRE(WaitFor([&] { return failed.answered() >= 1 && writer.Submit(PutWrite("/gcf/k/probe", "x", [](absl::Status) {})).code() != absl::StatusCode::kOk; }, 10));
  {
    std::lock_guard<std::mutex> lock(failed.mu);
    CHECK(failed.ok == 0);
    for (const absl::Status& s : failed.failed) CHECK(std::string(s.message()).find("could not be saved") != std::string::npos);
  }
  etcd::RangeOptions o;
  o.range_end = etcd::PrefixEnd("/gcf/k/after");
  absl::StatusOr<etcd::RangeResult> none = reader->Get("/gcf/k/after", o);
  REQUIRE(none.ok());
  CHECK(none->kvs.empty());

  // Reset: taken again (and failed again: still not the leader).
  writer.Reset();
  Outcomes again;
  CHECK(writer.Submit(PutWrite("/gcf/k/again", "x", again.Callback())).ok());
  REQUIRE(WaitFor([&] { return again.answered() == 1; }, 10));
  CHECK(again.ok == 0);
}

TEST_CASE("group commit: the queue is bounded while etcd has no quorum, and Stop fails what is queued",
          "[etcd][writer]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  auto client = TestClient(TestClientOptions(cluster));
  REQUIRE(client);
  Leader leader(client.get(), "/gcq/election/");
  etcd::StoreWriterOptions wo;
  wo.max_queued_writes = 4;
  etcd::StoreWriter writer(&leader.election, wo);
  // Without quorum the transaction in flight waits for the client's timeouts.
  cluster.Kill(1);
  cluster.Kill(2);
  Outcomes outcomes;
  REQUIRE(writer.Submit(PutWrite("/gcq/k/0", "x", outcomes.Callback())).ok());
  // The writer takes the first into its transaction; then 4 fit in the queue.
  REQUIRE(WaitFor([&] { return writer.stats().in_flight == 1; }, 10));
  int queued = 1;
  absl::Status refused;
  for (int i = 1; i < 20 && refused.ok(); ++i) {
    refused = writer.Submit(PutWrite(absl::StrCat("/gcq/k/", i), "x", outcomes.Callback()));
    if (refused.ok()) ++queued;
  }
  CHECK(refused.code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(refused.message()).find("max_queued_writes=4") != std::string::npos);
  CHECK(queued == 5);
  CHECK(writer.stats().queued == 4);
  const auto t0 = std::chrono::steady_clock::now();
  writer.Stop(absl::UnavailableError("test stop"));
  std::printf("group commit: Stop returned after %.2f s (the transaction in flight ended)\n", SecondsSince(t0));
  CHECK(outcomes.answered() == queued);  // Every accepted write answered by then.
  CHECK(outcomes.ok == 0);
  CHECK(writer.Submit(PutWrite("/gcq/k/late", "x", outcomes.Callback())).code() == absl::StatusCode::kUnavailable);
}
