// The server's memory budget (rendezvous/policy/memory_budget.h): charges, the
// members' reserve, the message of a refusal, and what the store and the
// registry charge to it.
#include <catch2/catch.hpp>

#include <memory>

#include "rendezvous/policy/memory_budget.h"
#include "rendezvous/run/run_registry.h"
#include "rendezvous/store/kv_store.h"

using namespace meshrun::rendezvous;
using Catch::Contains;

TEST_CASE("the memory budget refuses past its limit and keeps a reserve for members", "[memory]") {
  MemoryBudget b(1000, 200);
  REQUIRE(b.Charge(HeldKind::kEventStream, 1, 700, Claimant::kOther, "s1").ok());
  // Anyone else may use up to 800; members up to 1000.
  absl::Status s = b.Charge(HeldKind::kEventStream, 1, 200, Claimant::kOther, "s2");
  CHECK(absl::IsResourceExhausted(s));
  CHECK_THAT(std::string(s.message()), Contains("max_server_memory=") && Contains("event streams") &&
                                           Contains("kept for members") && Contains("refused s2"));
  CHECK(b.refusals() == 1);
  REQUIRE(b.Charge(HeldKind::kStoreKey, 2, 300, Claimant::kMember, "k").ok());
  CHECK(absl::IsResourceExhausted(b.Charge(HeldKind::kStoreKey, 1, 1, Claimant::kMember, "k2")));
  CHECK(b.held() == 1000);
  CHECK(b.objects(HeldKind::kStoreKey) == 2);
  b.Release(HeldKind::kStoreKey, 2, 300);
  CHECK(b.held() == 700);
  {
    HeldCharge c(&b, HeldKind::kParkedWait, 1, 100);
    b.ForceCharge(HeldKind::kParkedWait, 1, 100);
    CHECK(b.held(HeldKind::kParkedWait) == 100);
  }
  CHECK(b.held(HeldKind::kParkedWait) == 0);
  CHECK(b.held() == 700);
}

TEST_CASE("the release hook runs once enough memory was given back", "[memory]") {
  MemoryBudget b(1 << 30, 0);
  int calls = 0;
  b.SetReleaseHook([&] { ++calls; }, 1000);
  REQUIRE(b.Charge(HeldKind::kRun, 3, 3000, Claimant::kOther, "r").ok());
  b.Release(HeldKind::kRun, 1, 600);
  CHECK(calls == 0);
  b.Release(HeldKind::kRun, 1, 600);
  CHECK(calls == 1);
  b.Release(HeldKind::kRun, 1, 1800);
  CHECK(calls == 2);
}

TEST_CASE("the default budget is a share of the machine, at most 2 GiB", "[memory]") {
  const int64_t d = DefaultServerMemory();
  CHECK(d >= (int64_t{64} << 20));
  CHECK(d <= (int64_t{2} << 30));
}

TEST_CASE("a store charges its keys and parked reads, and gives them back", "[memory]") {
  DeadlineTimer timer;
  MemoryBudget b(1 << 20, 0);
  {
    auto kv = std::make_shared<KvStore>("run", &timer, ServerLimits(), nullptr, &b);
    REQUIRE(kv->Set(0, "key", "value").ok());
    CHECK(b.held(HeldKind::kStoreKey) == kStoreKeyCost + 3 + 5);
    REQUIRE(kv->Set(0, "key", "v").ok());  // Shrunk: the difference goes back.
    CHECK(b.held(HeldKind::kStoreKey) == kStoreKeyCost + 3 + 1);
    kv->Await(0, {"missing"}, absl::Seconds(30), [](absl::StatusOr<std::vector<std::string>>) {});
    CHECK(b.held(HeldKind::kParkedWait) == kParkedWaitCost);
    REQUIRE(kv->Set(0, "missing", "").ok());  // Wakes the read.
    CHECK(b.held(HeldKind::kParkedWait) == 0);
    REQUIRE(kv->Delete(0, "key").ok());
    CHECK(b.held(HeldKind::kStoreKey) == kStoreKeyCost + 7);
  }
  CHECK(b.held() == 0);
  // Past the budget: refused, naming it, and nothing written.
  MemoryBudget small(1000, 0);
  auto kv = std::make_shared<KvStore>("run", &timer, ServerLimits(), nullptr, &small);
  absl::Status s = kv->Set(0, "big", std::string(2000, 'x'));
  CHECK(absl::IsResourceExhausted(s));
  CHECK_THAT(std::string(s.message()), Contains("max_server_memory") && Contains("run 'run'"));
  CHECK(kv->size() == 0);
}

TEST_CASE("at max_runs a join removes the least recently used store-only run", "[memory]") {
  DeadlineTimer timer;
  ServerLimits l;
  l.max_runs = 2;
  MemoryBudget b(1 << 30, 0);
  absl::Time now = absl::FromUnixSeconds(1000);
  RunRegistry reg(&timer, l, [&] { return now; }, &b);
  REQUIRE(reg.FindOrCreate("old").ok());
  now += absl::Seconds(1);
  REQUIRE(reg.FindOrCreate("newer").ok());
  CHECK(b.objects(HeldKind::kRun) == 2);
  // A store call cannot make room; a join can.
  CHECK(absl::IsResourceExhausted(reg.FindOrCreate("third").status()));
  REQUIRE(reg.ForJoin("job", -1).ok());
  CHECK(reg.Find("old") == nullptr);
  CHECK(reg.Find("newer") != nullptr);
  CHECK(b.objects(HeldKind::kRun) == 2);
}

TEST_CASE("runs created per connection are bounded", "[memory]") {
  DeadlineTimer timer;
  ServerLimits l;
  l.max_runs_per_connection = 2;
  RunRegistry reg(&timer, l);
  REQUIRE(reg.FindOrCreate("a", nullptr, "conn").ok());
  REQUIRE(reg.ForJoin("b", -1, "conn").ok());
  absl::Status s = reg.FindOrCreate("c", nullptr, "conn").status();
  CHECK(absl::IsResourceExhausted(s));
  CHECK_THAT(std::string(s.message()), Contains("max_runs_per_connection=2"));
  CHECK(reg.FindOrCreate("c", nullptr, "other").ok());
  CHECK(reg.FindOrCreate("a", nullptr, "conn").ok());  // An existing run: not a new one.
}
