#include <catch2/catch.hpp>

#include <atomic>

#include "absl/strings/match.h"
#include "rendezvous/store/kv_store.h"

using namespace meshrun::rendezvous;

TEST_CASE("waiters park until every key is set, then fire once", "[kv]") {
  DeadlineTimer timer;
  auto kv = std::make_shared<KvStore>("run", &timer);
  std::atomic<int> fired{0};
  std::vector<std::string> got;
  kv->Await(0, {"a", "b"}, absl::Seconds(10), [&](absl::StatusOr<std::vector<std::string>> v) {
    REQUIRE(v.ok());
    got = *v;
    ++fired;
  });
  REQUIRE(kv->Set(0, "a", "1").ok());
  CHECK(fired == 0);
  REQUIRE(kv->Set(1, "b", "wrong round").ok());
  CHECK(fired == 0);
  REQUIRE(kv->Set(0, "b", "2").ok());
  CHECK(fired == 1);
  CHECK(got == std::vector<std::string>{"1", "2"});
  REQUIRE(kv->Set(0, "b", "3").ok());
  CHECK(fired == 1);
}

TEST_CASE("waiters expire, cancel, and are aborted by a new round", "[kv]") {
  DeadlineTimer timer;
  auto kv = std::make_shared<KvStore>("run", &timer);
  std::atomic<int> expired{0}, cancelled{0}, aborted{0};
  kv->Await(0, {"x"}, absl::Milliseconds(50), [&](absl::StatusOr<std::vector<std::string>> v) {
    if (absl::IsDeadlineExceeded(v.status())) ++expired;
  });
  auto id = kv->Await(0, {"y"}, absl::Seconds(30), [&](absl::StatusOr<std::vector<std::string>> v) {
    if (absl::IsCancelled(v.status())) ++cancelled;
  });
  kv->Await(0, {"z"}, absl::Seconds(30), [&](absl::StatusOr<std::vector<std::string>> v) {
    if (absl::IsAborted(v.status())) ++aborted;
  });
  kv->Cancel(id);
  kv->Cancel(id);
  CHECK(cancelled == 1);
  for (int i = 0; i < 200 && expired == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  CHECK(expired == 1);
  REQUIRE(kv->Set(0, "kept", "v").ok());
  kv->DropRoundsBelow(1);
  CHECK(aborted == 1);
  CHECK(kv->size() == 0);
}

TEST_CASE("a closed store refuses every call instead of answering from its emptied keys", "[kv]") {
  // Found by tests/jepsen/: a compare-set that found its run just before a
  // replica cleared its state ran on the emptied store, and answered "not
  // swapped, the key holds the expected value" (c10d's answer for an absent
  // key) although the key held that value durably.
  DeadlineTimer timer;
  auto kv = std::make_shared<KvStore>("run", &timer);
  REQUIRE(kv->Set(0, "r", "v1").ok());
  kv->Close("this server replica stopped serving");
  absl::StatusOr<std::pair<std::string, bool>> cas = kv->CompareSet(0, "r", "v1", "v2");
  CHECK(absl::IsUnavailable(cas.status()));
  CHECK(absl::StrContains(cas.status().message(), "stopped serving"));
  CHECK(absl::IsUnavailable(kv->Set(0, "r", "v3")));
  CHECK(absl::IsUnavailable(kv->MultiSet(0, {"a"}, {"b"})));
  CHECK(absl::IsUnavailable(kv->Add(0, "c", 1).status()));
  CHECK(absl::IsUnavailable(kv->Delete(0, "r").status()));
  CHECK(absl::IsUnavailable(kv->Check(0, {"r"}).status()));
  absl::Status read;
  kv->Await(0, {"r"}, absl::ZeroDuration(), [&](absl::StatusOr<std::vector<std::string>> v) { read = v.status(); });
  CHECK(absl::IsUnavailable(read));
}

TEST_CASE("add and compare-set follow c10d", "[kv]") {
  DeadlineTimer timer;
  auto kv = std::make_shared<KvStore>("run", &timer);
  CHECK(*kv->Add(0, "n", 2) == 2);
  CHECK(*kv->Add(0, "n", 3) == 5);
  REQUIRE(kv->Set(0, "s", "text").ok());
  CHECK(absl::IsFailedPrecondition(kv->Add(0, "s", 1).status()));
  CHECK(kv->CompareSet(0, "c", "", "v")->second);
  auto miss = *kv->CompareSet(0, "absent", "expected", "v");
  CHECK_FALSE(miss.second);
  CHECK(miss.first == "expected");
  auto now = *kv->CompareSet(0, "c", "v", "w");
  CHECK(now.second);
  CHECK(now.first == "w");
}

TEST_CASE("write-once keys (mesh/...) never change once set in a round", "[kv]") {
  DeadlineTimer timer;
  auto kv = std::make_shared<KvStore>("run", &timer);
  REQUIRE(kv->Set(0, "mesh/m0/verdict", "ok").ok());
  CHECK(kv->Set(0, "mesh/m0/verdict", "ok").ok());  // The same value: fine, nothing changes.
  absl::Status changed = kv->Set(0, "mesh/m0/verdict", "mismatch");
  CHECK(absl::IsFailedPrecondition(changed));
  CHECK(absl::StrContains(changed.message(), "'mesh/m0/verdict' is write-once"));
  CHECK(absl::IsFailedPrecondition(kv->MultiSet(0, {"mesh/new", "mesh/m0/verdict"}, {"a", "b"})));
  CHECK_FALSE(*kv->Check(0, {"mesh/new"}));  // All or nothing: mesh/new was not written.
  CHECK(absl::IsFailedPrecondition(kv->MultiSet(0, {"mesh/dup", "mesh/dup"}, {"a", "b"})));
  CHECK(kv->MultiSet(0, {"mesh/dup", "mesh/dup"}, {"a", "a"}).ok());
  // Compare-set from empty: the first proposal stays; a swap away is refused.
  auto first = kv->CompareSet(0, "mesh/m1/verdict", "", "ok");
  REQUIRE(first.ok());
  CHECK(first->second);
  auto second = kv->CompareSet(0, "mesh/m1/verdict", "", "timeout");
  REQUIRE(second.ok());
  CHECK(second->first == "ok");
  CHECK_FALSE(second->second);
  CHECK(absl::IsFailedPrecondition(kv->CompareSet(0, "mesh/m1/verdict", "ok", "other").status()));
  CHECK(absl::IsFailedPrecondition(kv->Delete(0, "mesh/m1/verdict").status()));
  CHECK(*kv->Delete(0, "mesh/absent") == false);
  REQUIRE(kv->Add(0, "mesh/count", 2).ok());  // Absent: set once.
  CHECK(*kv->Add(0, "mesh/count", 0) == 2);
  CHECK(absl::IsFailedPrecondition(kv->Add(0, "mesh/count", 1).status()));
  // Another round is another key; mutable keys keep c10d's overwrite.
  CHECK(kv->Set(1, "mesh/m0/verdict", "mismatch").ok());
  REQUIRE(kv->Set(0, "plain", "1").ok());
  CHECK(kv->Set(0, "plain", "2").ok());
  CHECK(*kv->Delete(0, "plain"));
}
