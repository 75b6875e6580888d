#include <catch2/catch.hpp>

#include <atomic>

#include "rendezvous/kv_store.h"

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
  kv->Set(0, "a", "1");
  CHECK(fired == 0);
  kv->Set(1, "b", "wrong round");
  CHECK(fired == 0);
  kv->Set(0, "b", "2");
  CHECK(fired == 1);
  CHECK(got == std::vector<std::string>{"1", "2"});
  kv->Set(0, "b", "3");
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
  kv->Set(0, "kept", "v");
  kv->DropRoundsBelow(1);
  CHECK(aborted == 1);
  CHECK(kv->size() == 0);
}

TEST_CASE("add and compare-set follow c10d", "[kv]") {
  DeadlineTimer timer;
  auto kv = std::make_shared<KvStore>("run", &timer);
  CHECK(*kv->Add(0, "n", 2) == 2);
  CHECK(*kv->Add(0, "n", 3) == 5);
  kv->Set(0, "s", "text");
  CHECK(absl::IsFailedPrecondition(kv->Add(0, "s", 1).status()));
  CHECK(kv->CompareSet(0, "c", "", "v")->second);
  auto miss = *kv->CompareSet(0, "absent", "expected", "v");
  CHECK_FALSE(miss.second);
  CHECK(miss.first == "expected");
  auto now = *kv->CompareSet(0, "c", "v", "w");
  CHECK(now.second);
  CHECK(now.first == "w");
}
