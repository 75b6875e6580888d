#include <catch2/catch.hpp>

#include <algorithm>
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

namespace {

// A durability hook that saves nothing until told: the saves it holds, in
// order, and what it refuses at once.
struct HeldSaves {
  std::vector<KvStore::SavedCallback> saves;
  std::vector<std::vector<std::pair<std::string, std::string>>> sets;
  absl::Status refuse;
  void Attach(KvStore& kv) {
    kv.SetDurability(
        [this](int64_t, const std::vector<std::pair<std::string, std::string>>& set, const std::vector<std::string>&,
               KvStore::SavedCallback saved) -> absl::StatusOr<bool> {
          if (!refuse.ok()) return refuse;
          sets.push_back(set);
          saves.push_back(std::move(saved));
          return false;
        },
        [](int64_t) {});
  }
  // Tells the i-th save's outcome.
  void Finish(size_t i, absl::Status s = absl::OkStatus()) { saves.at(i)(std::move(s)); }
};

}  // namespace

TEST_CASE("a write not saved yet is seen by the writes after it, but nothing that saw it is answered before it is saved",
          "[kv][durable]") {
  DeadlineTimer timer;
  auto kv = std::make_shared<KvStore>("run", &timer);
  HeldSaves held;
  held.Attach(*kv);
  std::vector<std::string> answered;  // In the order given.
  absl::Status set_status = absl::UnknownError("not answered");
  kv->Set(0, "c", "5", [&](absl::Status s) {
    set_status = s;
    answered.push_back("set");
  });
  // A parked read of a key the next write sets.
  kv->Await(0, {"k"}, absl::Seconds(30), [&](absl::StatusOr<std::vector<std::string>> v) {
    REQUIRE(v.ok());
    answered.push_back("parked read k=" + v->front());
  });
  // An add sees the unsaved 5; a compare-set that does not swap is a read.
  kv->Add(0, "c", 2, [&](absl::StatusOr<int64_t> v) { answered.push_back("add " + std::to_string(*v)); });
  kv->CompareSet(0, "c", "0", "9", [&](absl::StatusOr<std::pair<std::string, bool>> r) {
    answered.push_back("cas " + r->first + (r->second ? " swapped" : " kept"));
  });
  kv->MultiSet(0, {"k"}, {"v"}, [&](absl::Status s) { answered.push_back(s.ok() ? "multiset" : "multiset failed"); });
  kv->Await(0, {"c"}, absl::ZeroDuration(), [&](absl::StatusOr<std::vector<std::string>> v) {
    answered.push_back("read c=" + v->front());
  });
  CHECK(answered.empty());
  REQUIRE(held.saves.size() == 3);  // Set, Add, MultiSet: the reads wrote nothing.
  CHECK(held.sets[1] == std::vector<std::pair<std::string, std::string>>{{"c", "7"}});

  held.Finish(0);
  CHECK(answered == std::vector<std::string>{"set"});
  CHECK(set_status.ok());
  held.Finish(1);
  CHECK(answered == std::vector<std::string>{"set", "add 7", "cas 7 kept"});
  held.Finish(2);
  CHECK(answered ==
        std::vector<std::string>{"set", "add 7", "cas 7 kept", "parked read k=v", "multiset", "read c=7"});
  // Everything saved: answered at once again.
  CHECK(*kv->Check(0, {"c", "k"}));
}

TEST_CASE("a save that fails answers UNAVAILABLE to every call that waited on it, and closes the store",
          "[kv][durable]") {
  DeadlineTimer timer;
  auto kv = std::make_shared<KvStore>("run", &timer);
  HeldSaves held;
  held.Attach(*kv);
  std::vector<absl::Status> answers;
  kv->Set(0, "a", "1", [&](absl::Status s) { answers.push_back(s); });
  kv->Set(0, "a", "2", [&](absl::Status s) { answers.push_back(s); });
  absl::Status parked;
  kv->Await(0, {"never"}, absl::Seconds(30), [&](absl::StatusOr<std::vector<std::string>> v) { parked = v.status(); });
  absl::Status read;
  kv->Await(0, {"a"}, absl::ZeroDuration(), [&](absl::StatusOr<std::vector<std::string>> v) { read = v.status(); });
  held.Finish(0, absl::UnavailableError("etcd has no quorum"));
  REQUIRE(answers.size() == 2);
  for (const absl::Status& s : answers) {
    CHECK(absl::IsUnavailable(s));
    CHECK(absl::StrContains(s.message(), "etcd has no quorum"));
  }
  CHECK(absl::IsUnavailable(read));
  CHECK_FALSE(parked.ok());
  // What the store holds includes a write etcd may not have: nothing more
  // is answered from it; the later save's word changes nothing.
  held.Finish(1);
  CHECK(absl::IsUnavailable(kv->Check(0, {"a"}).status()));
  CHECK(absl::IsUnavailable(kv->Set(0, "b", "1")));
  CHECK(answers.size() == 2);
}

TEST_CASE("a write the durability hook refuses changes nothing, and a store removed with unsaved writes answers them",
          "[kv][durable]") {
  DeadlineTimer timer;
  auto kv = std::make_shared<KvStore>("run", &timer);
  HeldSaves held;
  held.Attach(*kv);
  held.refuse = absl::ResourceExhaustedError("queue full");
  absl::Status refused;
  kv->Set(0, "a", "1", [&](absl::Status s) { refused = s; });
  CHECK(absl::IsResourceExhausted(refused));
  CHECK(kv->size() == 0);
  CHECK(kv->bytes() == 0);
  held.refuse = absl::OkStatus();
  absl::Status late = absl::UnknownError("not answered");
  kv->Set(0, "a", "1", [&](absl::Status s) { late = s; });
  CHECK(absl::IsUnknown(late));
  kv.reset();
  CHECK(absl::IsUnavailable(late));
  CHECK(absl::StrContains(late.message(), "removed"));
  held.Finish(0);  // The store is gone: nothing to tell.
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

TEST_CASE("Keys counts and lists one round's keys under a prefix, and refuses a list longer than asked for", "[kv]") {
  DeadlineTimer timer;
  auto kv = std::make_shared<KvStore>("run", &timer);
  for (const char* k : {"torch/a", "torch/b", "torch/c/d", "torch-internal/x", "mesh/y"}) REQUIRE(kv->Set(0, k, "v").ok());
  REQUIRE(kv->Set(1, "torch/other-round", "v").ok());
  auto count = kv->Keys(0, "torch/", 0);
  REQUIRE(count.ok());
  CHECK(count->count == 3);
  CHECK(count->keys.empty());  // max_keys 0: the count alone.
  auto list = kv->Keys(0, "torch/", 3);
  REQUIRE(list.ok());
  std::sort(list->keys.begin(), list->keys.end());
  CHECK(list->keys == std::vector<std::string>{"torch/a", "torch/b", "torch/c/d"});
  auto all = kv->Keys(0, "", 0);
  REQUIRE(all.ok());
  CHECK(all->count == 5);
  auto too_many = kv->Keys(0, "torch/", 2);
  CHECK(absl::IsResourceExhausted(too_many.status()));
  CHECK(too_many.status().message() == "3 keys of round 0 start with 'torch/', more than the 2 asked for");
  REQUIRE(kv->Delete(0, "torch/a").ok());
  CHECK(kv->Keys(0, "torch/", 0)->count == 2);
  kv->DropRoundsBelow(1);
  CHECK(kv->Keys(0, "", 0)->count == 0);
  CHECK(kv->Keys(1, "torch/", 0)->count == 1);
}
