// Every byte charged (issue 30): a replica that takes over charges what it
// restores (runs, nodes, store keys) to its memory budget, whatever the
// budget holds, and refuses new writes past it; the members' reserve serves
// a run's store only once a round of it closed.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "rendezvous/policy/memory_budget.h"
#include "rendezvous/run/run.h"
#include "rendezvous/run/run_registry.h"
#include "rendezvous/state/state.h"
#include "tests/rendezvous/run_test_support.h"

using namespace meshrun::rendezvous;
using namespace meshrun::rendezvous::testing;
using meshrun::rendezvous::state::MemoryJournal;

TEST_CASE("a new leader charges what it restores, beyond its budget if it must, and refuses new keys past it",
          "[state][memory]") {
  DeadlineTimer timer;
  MemoryJournal journal;
  const std::string value(60 << 10, 'v');
  {
    // The first leader, with room for it all: 32 keys of 60 KiB (~1.9 MiB),
    // and a job's closed round of 2 nodes.
    MemoryBudget big(64 << 20, 0);
    RunRegistry first(&timer, ServerLimits(), nullptr, &big);
    first.SetJournal(&journal);
    std::shared_ptr<Run> kv = *first.FindOrCreate("kv-only");
    for (int i = 0; i < 32; ++i) REQUIRE(kv->kv().Set(0, "k" + std::to_string(i), value).ok());
    std::shared_ptr<Run> job = *first.ForJoin("job", -1);
    for (const char* id : {"a", "b"}) {
      creds.Join(*job, Node(id, 1, id), Config(2, 2), -1, [](absl::StatusOr<Assignment> r) { REQUIRE(r.ok()); });
    }
  }
  // The next leader's budget holds less than the state it takes over.
  MemoryBudget small(1 << 20, 0);
  RunRegistry second(&timer, ServerLimits(), nullptr, &small);
  second.SetJournal(&journal);
  second.Restore(*journal.Load(), "failover");
  // Nothing etcd holds is left out...
  std::shared_ptr<Run> kv = second.Find("kv-only");
  REQUIRE(kv != nullptr);
  CHECK(kv->kv().size() == 32);
  REQUIRE(second.Find("job") != nullptr);
  // ...and all of it is charged: runs, nodes, keys with their bytes.
  CHECK(small.objects(HeldKind::kRun) == 2);
  CHECK(small.objects(HeldKind::kNode) == 2);
  CHECK(small.objects(HeldKind::kStoreKey) == 32);
  CHECK(small.held(HeldKind::kStoreKey) >= 32 * static_cast<int64_t>(value.size()));
  CHECK(small.held() > small.limit());
  // Past the budget, a new key is refused and names it.
  absl::Status s = kv->kv().Set(0, "more", value);
  CHECK(absl::IsResourceExhausted(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("max_server_memory="));
  // The charge goes when the run does.
  second.Clear("test over");
  CHECK(small.objects(HeldKind::kStoreKey) == 0);
  CHECK(small.objects(HeldKind::kNode) == 0);
}

TEST_CASE("the members' reserve serves a run's store only once a round of it closed", "[memory]") {
  DeadlineTimer timer;
  // 1 MiB, of which 768 KiB are kept for members.
  MemoryBudget budget(1 << 20, 768 << 10);
  RunRegistry registry(&timer, ServerLimits(), nullptr, &budget);
  std::shared_ptr<Run> run = *registry.ForJoin("job", -1);
  const std::string value(100 << 10, 'v');
  // One join waits (anyone with the token can send one): its run's keys are
  // not a member's yet, and stop at the 256 KiB open to everyone.
  bool answered = false;
  creds.Join(*run, Node("a", 1, "a"), Config(2, 2), -1, [&](absl::StatusOr<Assignment>) { answered = true; });
  REQUIRE_FALSE(answered);
  int before = 0;
  while (before < 20 && run->kv().Set(0, "w" + std::to_string(before), value).ok()) ++before;
  CHECK(before <= 2);
  // The round closes: the reserve is its members' from now on.
  creds.Join(*run, Node("b", 1, "b"), Config(2, 2), -1, [](absl::StatusOr<Assignment> r) { REQUIRE(r.ok()); });
  REQUIRE(answered);
  int after = 0;
  while (after < 20 && run->kv().Set(0, "m" + std::to_string(after), value).ok()) ++after;
  CHECK(after >= 6);
}
