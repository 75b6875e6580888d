// StoreCache (agent/store_proxy/store_cache.h) over the server's real store (KvStore),
// counting the requests that reach it.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "agent/store_proxy/store_cache.h"
#include "rendezvous/store/kv_store.h"

using meshrun::agent::StoreCache;
using meshrun::agent::StoreCacheOptions;
using meshrun::agent::StoreRequest;
using meshrun::agent::StoreUpstream;
using meshrun::rendezvous::DeadlineTimer;
using meshrun::rendezvous::KvStore;

namespace {

// The server's store as the cache's upstream: a request is a KvMultiGet
// (sets, then a parked read), as rendezvous_service.cc serves it.
class KvUpstream : public StoreUpstream {
 public:
  KvUpstream() : kv_(std::make_shared<KvStore>("run", &timer_)) {}

  void Start(Id id, StoreRequest r, Done done) override {
    requests_.fetch_add(1);
    keys_read_.fetch_add(static_cast<int64_t>(r.keys.size()));
    if (!r.set_keys.empty()) {
      if (absl::Status s = kv_->MultiSet(r.round, r.set_keys, r.set_values); !s.ok()) {
        done(s);
        return;
      }
    }
    auto shared = std::make_shared<Done>(std::move(done));
    // Waits travel in whole milliseconds (wait_ms), as over gRPC.
    const absl::Duration wait = r.wait == absl::InfiniteDuration() ? absl::Hours(24)
                                                                   : absl::Trunc(r.wait, absl::Milliseconds(1));
    KvStore::WaiterId w = kv_->Await(r.round, r.keys, wait, [this, id, shared](auto v) {
      {
        absl::MutexLock lock(&mu_);
        parked_.erase(id);
      }
      (*shared)(std::move(v));
    });
    if (w != 0) {
      absl::MutexLock lock(&mu_);
      parked_[id] = w;
    }
  }
  void Cancel(Id id) override {
    KvStore::WaiterId w = 0;
    {
      absl::MutexLock lock(&mu_);
      auto it = parked_.find(id);
      if (it == parked_.end()) return;
      w = it->second;
    }
    cancels_.fetch_add(1);
    kv_->Cancel(w);
  }
  int parked() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(parked_.size());
  }

  DeadlineTimer timer_;
  std::shared_ptr<KvStore> kv_;
  std::atomic<int> requests_{0};
  std::atomic<int64_t> keys_read_{0};
  std::atomic<int> cancels_{0};
  absl::Mutex mu_;
  std::map<Id, KvStore::WaiterId> parked_ ABSL_GUARDED_BY(mu_);
};

// One answer, waited for with a bound.
struct Answer {
  absl::Notification done;
  absl::StatusOr<std::vector<std::string>> result = absl::UnknownError("not answered");
  StoreUpstream::Done Callback() {
    return [this](absl::StatusOr<std::vector<std::string>> r) {
      result = std::move(r);
      done.Notify();
    };
  }
  bool Wait(absl::Duration d = absl::Seconds(10)) { return done.WaitForNotificationWithTimeout(d); }
};

StoreRequest Read(int64_t round, std::vector<std::string> keys, absl::Duration wait) {
  StoreRequest r;
  r.round = round;
  r.keys = std::move(keys);
  r.wait = wait;
  return r;
}

}  // namespace

TEST_CASE("store cache: 8 local reads of one unique id are one server request, then none", "[store_cache]") {
  KvUpstream up;
  StoreCache cache(&up);
  cache.SetRound(0);
  std::vector<std::unique_ptr<Answer>> answers;
  for (int i = 0; i < 8; ++i) {
    answers.push_back(std::make_unique<Answer>());
    cache.Submit(Read(0, {"mesh/m0/d0/row0/id"}, absl::Seconds(30)), answers.back()->Callback());
  }
  CHECK(up.requests_ == 1);
  CHECK(up.parked() == 1);
  REQUIRE(up.kv_->Set(0, "mesh/m0/d0/row0/id", "unique-id-bytes").ok());
  for (auto& a : answers) {
    REQUIRE(a->Wait());
    REQUIRE(a->result.ok());
    CHECK((*a->result)[0] == "unique-id-bytes");
  }
  // Known for the round now: answered here.
  Answer later;
  cache.Submit(Read(0, {"mesh/m0/d0/row0/id"}, absl::ZeroDuration()), later.Callback());
  REQUIRE(later.Wait());
  CHECK((*later.result)[0] == "unique-id-bytes");
  CHECK(up.requests_ == 1);
  CHECK(cache.stats().keys_coalesced == 7);
  CHECK(cache.stats().keys_from_cache == 1);
  cache.Shutdown();
}

TEST_CASE("store cache: mutable keys pass through, uncached, and see every change", "[store_cache]") {
  KvUpstream up;
  StoreCache cache(&up);
  cache.SetRound(0);
  for (const char* value : {"1", "2", "3"}) {
    REQUIRE(up.kv_->Set(0, "counter", value).ok());
    Answer a;
    cache.Submit(Read(0, {"counter"}, absl::ZeroDuration()), a.Callback());
    REQUIRE(a.Wait());
    REQUIRE(a.result.ok());
    CHECK((*a.result)[0] == value);
  }
  CHECK(up.requests_ == 3);
  // A request mixing a mutable key is sent as it is (one request), and its
  // write-once value is learned.
  REQUIRE(up.kv_->Set(0, "mesh/x", "once").ok());
  Answer mixed;
  cache.Submit(Read(0, {"counter", "mesh/x"}, absl::ZeroDuration()), mixed.Callback());
  REQUIRE(mixed.Wait());
  CHECK(*mixed.result == std::vector<std::string>{"3", "once"});
  CHECK(cache.stats().passed_through == 4);
  CHECK(cache.AllCached(0, {"mesh/x"}));
  CHECK_FALSE(cache.AllCached(0, {"counter"}));
  // Absent and not waited for: the server's NOT_FOUND.
  Answer absent;
  cache.Submit(Read(0, {"mesh/absent"}, absl::ZeroDuration()), absent.Callback());
  REQUIRE(absent.Wait());
  CHECK(absl::IsNotFound(absent.result.status()));
  cache.Shutdown();
}

TEST_CASE("store cache: a request's sets go in its one server request and are then known locally",
          "[store_cache]") {
  KvUpstream up;
  StoreCache cache(&up);
  cache.SetRound(0);
  // Rank 1 publishes and waits for rank 0's; rank 0 publishes and reads rank 1's.
  StoreRequest r1 = Read(0, {"mesh/a/data/r0"}, absl::Seconds(30));
  r1.set_keys = {"mesh/a/data/r1"};
  r1.set_values = {"p1"};
  Answer a1;
  cache.Submit(std::move(r1), a1.Callback());
  CHECK(up.requests_ == 1);
  StoreRequest r0 = Read(0, {"mesh/a/data/r1"}, absl::Seconds(30));
  r0.set_keys = {"mesh/a/data/r0"};
  r0.set_values = {"p0"};
  Answer a0;
  cache.Submit(std::move(r0), a0.Callback());
  REQUIRE(a0.Wait());
  REQUIRE(a1.Wait());
  CHECK(*a0.result == std::vector<std::string>{"p1"});
  CHECK(*a1.result == std::vector<std::string>{"p0"});
  CHECK(up.requests_ == 2);
  // Both published values are known: a third local reader costs nothing.
  Answer a2;
  cache.Submit(Read(0, {"mesh/a/data/r0", "mesh/a/data/r1"}, absl::Seconds(1)), a2.Callback());
  REQUIRE(a2.Wait());
  CHECK(*a2.result == std::vector<std::string>{"p0", "p1"});
  CHECK(up.requests_ == 2);
  // A refused write (write-once, another value) is the writer's error.
  StoreRequest bad = Read(0, {}, absl::ZeroDuration());
  bad.set_keys = {"mesh/a/data/r0"};
  bad.set_values = {"changed"};
  Answer refused;
  cache.Submit(std::move(bad), refused.Callback());
  REQUIRE(refused.Wait());
  CHECK(absl::IsFailedPrecondition(refused.result.status()));
  cache.Shutdown();
}

TEST_CASE("store cache: each read keeps its own deadline", "[store_cache]") {
  KvUpstream up;
  StoreCache cache(&up);
  cache.SetRound(0);
  // A long read in flight; a shorter one does not join it (it would wait
  // too long) and times out on its own.
  Answer slow, quick;
  cache.Submit(Read(0, {"mesh/k"}, absl::Seconds(30)), slow.Callback());
  const absl::Time start = absl::Now();
  cache.Submit(Read(0, {"mesh/k"}, absl::Milliseconds(100)), quick.Callback());
  REQUIRE(quick.Wait());
  CHECK(absl::IsDeadlineExceeded(quick.result.status()));
  CHECK(absl::Now() - start < absl::Seconds(5));
  CHECK(up.requests_ == 2);
  // A longer read joins a shorter one in flight; when that one times out,
  // the longer one asks again and gets the value set afterwards.
  Answer shorter, longer;
  cache.Submit(Read(0, {"mesh/j"}, absl::Milliseconds(100)), shorter.Callback());
  cache.Submit(Read(0, {"mesh/j"}, absl::Seconds(30)), longer.Callback());
  CHECK(up.requests_ == 3);
  REQUIRE(shorter.Wait());
  CHECK(absl::IsDeadlineExceeded(shorter.result.status()));
  REQUIRE(up.kv_->Set(0, "mesh/j", "v").ok());
  REQUIRE(longer.Wait());
  REQUIRE(longer.result.ok());
  CHECK((*longer.result)[0] == "v");
  CHECK(up.requests_ == 4);
  // A read joins one whose deadline is a fraction of a millisecond earlier:
  // when that one times out, what is left of its own wait rounds to 0 ms on
  // the wire, an immediate read; it must still end as a waiting read
  // (DEADLINE_EXCEEDED), never NOT_FOUND.
  for (int i = 0; i < 10; ++i) {
    Answer first, second;
    const std::string key = absl::StrCat("mesh/late", i);
    cache.Submit(Read(0, {key}, absl::Milliseconds(50)), first.Callback());
    absl::SleepFor(absl::Microseconds(100 * (i + 1)));
    cache.Submit(Read(0, {key}, absl::Milliseconds(50)), second.Callback());
    REQUIRE(first.Wait());
    REQUIRE(second.Wait());
    CHECK(absl::IsDeadlineExceeded(first.result.status()));
    INFO(second.result.status());
    CHECK(absl::IsDeadlineExceeded(second.result.status()));
  }
  REQUIRE(up.kv_->Set(0, "mesh/k", "w").ok());
  REQUIRE(slow.Wait());
  CHECK((*slow.result)[0] == "w");
  cache.Shutdown();
}

TEST_CASE("store cache: a read does not join one that also waits for a key it is to write itself", "[store_cache]") {
  // As in a mesh's agreement: a member waits for the verdict and the data;
  // the first member reads the data, then writes the verdict. Had the first
  // member's read of the data joined the member's read (which also waits
  // for the verdict), neither would ever be answered.
  KvUpstream up;
  StoreCache cache(&up);
  cache.SetRound(0);
  Answer member, first;
  cache.Submit(Read(0, {"mesh/a/verdict", "mesh/a/data/r0"}, absl::Seconds(10)), member.Callback());
  cache.Submit(Read(0, {"mesh/a/data/r0"}, absl::Seconds(10)), first.Callback());
  CHECK(up.requests_ == 2);
  REQUIRE(up.kv_->Set(0, "mesh/a/data/r0", "d0").ok());
  REQUIRE(first.Wait(absl::Seconds(5)));
  REQUIRE(first.result.ok());
  CHECK((*first.result)[0] == "d0");
  REQUIRE(up.kv_->Set(0, "mesh/a/verdict", "ok").ok());  // Written once the data was read.
  REQUIRE(member.Wait(absl::Seconds(5)));
  CHECK(*member.result == std::vector<std::string>{"ok", "d0"});
  // A read that wants everything a read in flight waits for joins it.
  Answer wide, wider;
  cache.Submit(Read(0, {"mesh/b/x"}, absl::Seconds(10)), wide.Callback());
  cache.Submit(Read(0, {"mesh/b/x", "mesh/b/y"}, absl::Seconds(10)), wider.Callback());
  CHECK(up.requests_ == 4);  // y alone went out; x joined.
  CHECK(cache.stats().keys_coalesced == 1);
  REQUIRE(up.kv_->MultiSet(0, {"mesh/b/x", "mesh/b/y"}, {"X", "Y"}).ok());
  REQUIRE(wide.Wait());
  REQUIRE(wider.Wait());
  CHECK(*wider.result == std::vector<std::string>{"X", "Y"});
  cache.Shutdown();
}

TEST_CASE("store cache: cancelling one reader keeps the read for the others, the last cancels it",
          "[store_cache]") {
  KvUpstream up;
  StoreCache cache(&up);
  cache.SetRound(0);
  Answer first, second;
  StoreCache::ReadId id1 = cache.Submit(Read(0, {"mesh/c"}, absl::Seconds(30)), first.Callback());
  StoreCache::ReadId id2 = cache.Submit(Read(0, {"mesh/c"}, absl::Seconds(30)), second.Callback());
  CHECK(up.requests_ == 1);
  cache.Cancel(id1);
  REQUIRE(first.Wait());
  CHECK(absl::IsCancelled(first.result.status()));
  CHECK(up.cancels_ == 0);
  CHECK(up.parked() == 1);
  cache.Cancel(id2);
  REQUIRE(second.Wait());
  CHECK(absl::IsCancelled(second.result.status()));
  CHECK(up.cancels_ == 1);
  for (int i = 0; i < 100 && up.parked() > 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  CHECK(up.parked() == 0);
  cache.Cancel(id2);  // Answered already: nothing happens.
  cache.Shutdown();
}

TEST_CASE("store cache: a new round drops the old round's values and aborts its readers", "[store_cache]") {
  KvUpstream up;
  StoreCache cache(&up);
  cache.SetRound(0);
  REQUIRE(up.kv_->Set(0, "mesh/id", "round0").ok());
  Answer known;
  cache.Submit(Read(0, {"mesh/id"}, absl::ZeroDuration()), known.Callback());
  REQUIRE(known.Wait());
  CHECK(cache.AllCached(0, {"mesh/id"}));
  Answer waiting;
  cache.Submit(Read(0, {"mesh/late"}, absl::Seconds(30)), waiting.Callback());
  cache.SetRound(1);
  REQUIRE(waiting.Wait());
  CHECK(absl::IsAborted(waiting.result.status()));
  CHECK(cache.stats().cached_keys == 0);
  CHECK_FALSE(cache.AllCached(0, {"mesh/id"}));
  // Round 1's key of the same name is another key.
  const int before = up.requests_;
  Answer fresh;
  cache.Submit(Read(1, {"mesh/id"}, absl::ZeroDuration()), fresh.Callback());
  REQUIRE(fresh.Wait());
  CHECK(absl::IsNotFound(fresh.result.status()));
  CHECK(up.requests_ == before + 1);
  cache.SetRound(0);  // Rounds only move forward.
  CHECK(cache.round() == 1);
  cache.Shutdown();
}

TEST_CASE("store cache: bounded: waiters refused past the limit, values not kept past the bytes", "[store_cache]") {
  KvUpstream up;
  StoreCacheOptions o;
  o.max_waiters = 2;
  o.max_cache_bytes = 20;
  StoreCache cache(&up, o);
  cache.SetRound(0);
  Answer a, b, c;
  cache.Submit(Read(0, {"mesh/w1"}, absl::Seconds(30)), a.Callback());
  cache.Submit(Read(0, {"mesh/w2"}, absl::Seconds(30)), b.Callback());
  cache.Submit(Read(0, {"mesh/w3"}, absl::Seconds(30)), c.Callback());
  REQUIRE(c.Wait());
  CHECK(absl::IsResourceExhausted(c.result.status()));
  CHECK(absl::StrContains(c.result.status().message(), "store_proxy_max_waiters=2"));
  REQUIRE(up.kv_->Set(0, "mesh/w1", "0123456789abcdef").ok());  // 23 bytes with its key.
  REQUIRE(a.Wait());
  CHECK((*a.result)[0] == "0123456789abcdef");
  CHECK(cache.stats().values_not_kept == 1);
  CHECK_FALSE(cache.AllCached(0, {"mesh/w1"}));
  cache.Shutdown();
  REQUIRE(b.Wait());
  CHECK(absl::IsCancelled(b.result.status()));
}

TEST_CASE("store cache: a compare-set's answer is kept only when it says what the key holds", "[store_cache]") {
  KvUpstream up;
  StoreCache cache(&up);
  cache.SetRound(3);
  cache.LearnCompareSet(3, "mesh/v1", "x", "x", /*swapped=*/false);  // Maybe absent: says nothing.
  CHECK_FALSE(cache.AllCached(3, {"mesh/v1"}));
  cache.LearnCompareSet(3, "mesh/v1", "", "ok", /*swapped=*/false);  // From empty: the current value.
  CHECK(cache.AllCached(3, {"mesh/v1"}));
  cache.LearnCompareSet(3, "mesh/v2", "a", "b", /*swapped=*/true);
  CHECK(cache.AllCached(3, {"mesh/v2"}));
  cache.LearnCompareSet(3, "plain", "", "v", /*swapped=*/true);  // Mutable: never kept.
  CHECK_FALSE(cache.AllCached(3, {"plain"}));
  cache.LearnWrites(2, {"mesh/old"}, {"v"});  // Another round: not kept.
  CHECK_FALSE(cache.AllCached(2, {"mesh/old"}));
  cache.Shutdown();
}

TEST_CASE("store cache: many threads reading many shared keys get every value once each", "[store_cache]") {
  KvUpstream up;
  StoreCache cache(&up);
  cache.SetRound(0);
  constexpr int kThreads = 8, kKeys = 16;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kKeys; ++k) {
        Answer a;
        std::vector<std::string> keys{absl::StrCat("mesh/k", k), absl::StrCat("mesh/k", (k + t) % kKeys)};
        cache.Submit(Read(0, keys, absl::Seconds(20)), a.Callback());
        if (!a.Wait(absl::Seconds(20)) || !a.result.ok()) continue;
        if ((*a.result)[0] == absl::StrCat("v", k) && (*a.result)[1] == absl::StrCat("v", (k + t) % kKeys)) ++ok;
      }
    });
  }
  for (int k = 0; k < kKeys; ++k) {
    absl::SleepFor(absl::Milliseconds(2));
    REQUIRE(up.kv_->Set(0, absl::StrCat("mesh/k", k), absl::StrCat("v", k)).ok());
  }
  for (auto& t : threads) t.join();
  CHECK(ok == kThreads * kKeys);
  // Never more server requests than worker requests.
  CHECK(up.requests_ <= kThreads * kKeys);
  cache.Shutdown();
}
