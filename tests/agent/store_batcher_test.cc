// StoreBatcher (agent/store_proxy/store_batcher.h): the rule that decides which of a
// node's store requests share a server call. The server side is a
// recording BatchUpstream here (the policy is what is tested; the real
// KvBatch call is tested in tests/agent/store_proxy_test.cc against a
// real server).
#include <catch2/catch.hpp>

#include <vector>

#include "absl/synchronization/mutex.h"
#include "agent/store_proxy/store_batcher.h"

using namespace meshrun;
using namespace meshrun::agent;

namespace {

struct Recorded {
  std::vector<BatchItem> items;
  absl::AnyInvocable<void()> accepted;
};

class RecordingUpstream : public BatchUpstream {
 public:
  void StartBatch(std::vector<BatchItem> items, absl::AnyInvocable<void()> accepted) override {
    absl::MutexLock lock(&mu);
    batches.push_back({std::move(items), std::move(accepted)});
  }
  size_t count() {
    absl::MutexLock lock(&mu);
    return batches.size();
  }
  void Cancel(StoreUpstream::Id id) override { cancelled.push_back(id); }
  // Answers every item of batch `b` with its first key and accepts it.
  void Accept(size_t b) {
    auto a = std::move(batches.at(b).accepted);
    a();
  }
  absl::Mutex mu;  // StartBatch may run on the batcher's timer thread.
  std::vector<Recorded> batches;
  std::vector<StoreUpstream::Id> cancelled;
};

StoreRequest Req(const std::string& key, int value_bytes = 0) {
  StoreRequest r;
  r.keys = {key};
  if (value_bytes > 0) {
    r.set_keys = {key};
    r.set_values = {std::string(static_cast<size_t>(value_bytes), 'v')};
  }
  r.wait = absl::Seconds(1);
  return r;
}

}  // namespace

TEST_CASE("store batcher: a lone request goes at once, a burst behind it goes as one call", "[store_batcher]") {
  RecordingUpstream up;
  StoreBatcher b(&up);
  int answered = 0;
  auto done = [&](absl::StatusOr<std::vector<std::string>> r) { answered += r.ok() ? 1 : 0; };
  b.Start(1, Req("mesh/a"), done);
  REQUIRE(up.batches.size() == 1);  // Not held: nothing was waiting for acceptance.
  CHECK(up.batches[0].items.size() == 1);
  for (StoreUpstream::Id id = 2; id <= 8; ++id) b.Start(id, Req("mesh/k" + std::to_string(id)), done);
  CHECK(up.batches.size() == 1);  // Held until the first is accepted.
  up.Accept(0);
  REQUIRE(up.batches.size() == 2);
  CHECK(up.batches[1].items.size() == 7);
  CHECK(up.batches[1].items.front().id == 2);
  CHECK(up.batches[1].items.back().id == 8);
  up.Accept(1);  // Nothing held: the next request goes at once again.
  b.Start(9, Req("mesh/z"), done);
  CHECK(up.batches.size() == 3);
  StoreBatcherStats st = b.stats();
  CHECK(st.items == 9);
  CHECK(st.batches == 3);
  // Answers are the upstream's, item by item.
  for (auto& batch : up.batches) {
    for (auto& item : batch.items) item.done(std::vector<std::string>{"v"});
  }
  CHECK(answered == 9);
}

TEST_CASE("store batcher: batches are bounded in items and bytes", "[store_batcher]") {
  RecordingUpstream up;
  StoreBatcherOptions o;
  o.max_items = 3;
  o.max_bytes = 1000;
  StoreBatcher b(&up, o);
  auto ignore = [](absl::StatusOr<std::vector<std::string>>) {};
  b.Start(1, Req("mesh/first"), ignore);
  for (StoreUpstream::Id id = 2; id <= 5; ++id) b.Start(id, Req("mesh/k"), ignore);
  b.Start(6, Req("mesh/big", 900), ignore);
  b.Start(7, Req("mesh/big2", 900), ignore);
  up.Accept(0);
  REQUIRE(up.batches.size() == 2);
  CHECK(up.batches[1].items.size() == 3);  // max_items.
  up.Accept(1);
  REQUIRE(up.batches.size() == 3);
  CHECK(up.batches[2].items.size() == 2);  // id 5 and the first big one: the second would pass max_bytes.
  up.Accept(2);
  REQUIRE(up.batches.size() == 4);
  CHECK(up.batches[3].items.size() == 1);  // The second big one, alone.
  up.Accept(3);
  CHECK(up.batches.size() == 4);
}

TEST_CASE("store batcher: a held request cancelled is answered CANCELLED and never sent", "[store_batcher]") {
  RecordingUpstream up;
  StoreBatcher b(&up);
  std::vector<absl::Status> got;
  auto record = [&](absl::StatusOr<std::vector<std::string>> r) { got.push_back(r.status()); };
  b.Start(1, Req("mesh/a"), record);
  b.Start(2, Req("mesh/b"), record);
  b.Start(3, Req("mesh/c"), record);
  b.Cancel(2);
  REQUIRE(got.size() == 1);
  CHECK(absl::IsCancelled(got[0]));
  CHECK(up.cancelled.empty());
  b.Cancel(1);  // Sent already: the upstream cancels it in its call.
  CHECK(up.cancelled == std::vector<StoreUpstream::Id>{1});
  up.Accept(0);
  REQUIRE(up.batches.size() == 2);
  REQUIRE(up.batches[1].items.size() == 1);
  CHECK(up.batches[1].items[0].id == 3);
}

TEST_CASE("store batcher: publications wait for the node's other workers, then go as one call", "[store_batcher]") {
  RecordingUpstream up;
  StoreBatcherOptions o;
  o.expected_publishers = 4;
  o.publication_hold = absl::Seconds(30);  // Not reached here.
  StoreBatcher b(&up, o);
  auto ignore = [](absl::StatusOr<std::vector<std::string>>) {};
  CHECK(IsPublication(Req("mesh/a", 8)));
  CHECK_FALSE(IsPublication(Req("mesh/a")));  // A read.
  StoreRequest mutable_set = Req("mesh/a", 8);
  mutable_set.set_keys = {"counter"};
  CHECK_FALSE(IsPublication(mutable_set));
  for (StoreUpstream::Id id = 1; id <= 3; ++id) b.Start(id, Req("mesh/p" + std::to_string(id), 8), ignore);
  CHECK(up.count() == 0);  // 3 of 4 workers published: held.
  b.Start(4, Req("mesh/p4", 8), ignore);
  REQUIRE(up.count() == 1);
  CHECK(up.batches[0].items.size() == 4);
  CHECK(b.stats().holds_ended_by_time == 0);
  // A read is not held.
  up.Accept(0);
  b.Start(5, Req("mesh/r"), ignore);
  CHECK(up.count() == 2);
}

TEST_CASE("store batcher: a hold ends after publication_hold when not every worker publishes", "[store_batcher]") {
  RecordingUpstream up;
  StoreBatcherOptions o;
  o.expected_publishers = 8;
  o.publication_hold = absl::Milliseconds(50);
  StoreBatcher b(&up, o);
  auto ignore = [](absl::StatusOr<std::vector<std::string>>) {};
  const absl::Time t0 = absl::Now();
  b.Start(1, Req("mesh/p1", 8), ignore);
  b.Start(2, Req("mesh/p2", 8), ignore);
  CHECK(up.count() == 0);
  for (int i = 0; i < 500 && up.count() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));  // Bounded: 5 s.
  const absl::Duration waited = absl::Now() - t0;
  REQUIRE(up.count() == 1);
  CHECK(up.batches[0].items.size() == 2);
  CHECK(waited >= absl::Milliseconds(50));
  CHECK(b.stats().holds_ended_by_time == 1);
  // A held publication cancelled is answered at once, and the count of
  // held ones follows: the next hold again waits for 8.
  up.Accept(0);
  std::vector<absl::Status> got;
  b.Start(3, Req("mesh/p3", 8), [&](absl::StatusOr<std::vector<std::string>> r) { got.push_back(r.status()); });
  b.Cancel(3);
  REQUIRE(got.size() == 1);
  CHECK(absl::IsCancelled(got[0]));
}
