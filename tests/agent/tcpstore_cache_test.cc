// The agent store's read cache (agent/tcpstore/read_cache.h): the cache
// alone, and the agent store over a real rendezvous server's store, spoken to
// over real sockets, with the server's own request counters as the witness of
// what reached it.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/synchronization/notification.h"
#include "agent/tcpstore/read_cache.h"
#include "tests/agent/tcpstore_fixture.h"

using namespace meshrun;
using namespace meshrun::agent::tcpstore;
using namespace meshrun::testing::tcpstore;

TEST_CASE("read cache: a value is kept only when no write of its key was in flight while it was read",
          "[read_cache]") {
  ReadCache cache(1 << 20);
  // Read with nothing in flight: kept.
  ReadCache::Ticket t = cache.BeforeRead("a");
  cache.Fill("a", "1", t);
  CHECK(cache.Get("a") == "1");
  // A write sent drops it; a read whose ticket was taken before the write
  // was sent is not kept, nor one taken while it is in flight, nor one
  // taken then and filled after its answer.
  const ReadCache::Ticket before = cache.BeforeRead("a");
  cache.WriteSent({"a"});
  CHECK_FALSE(cache.Get("a"));
  cache.Fill("a", "1", before);
  CHECK_FALSE(cache.Get("a"));
  const ReadCache::Ticket during = cache.BeforeRead("a");
  CHECK_FALSE(during.clean);
  cache.Fill("a", "2", during);
  CHECK_FALSE(cache.Get("a"));
  cache.WriteAnswered({"a"}, /*ok=*/true);
  cache.Fill("a", "2", during);
  CHECK_FALSE(cache.Get("a"));
  // A read started after the answer is kept.
  t = cache.BeforeRead("a");
  cache.Fill("a", "2", t);
  CHECK(cache.Get("a") == "2");
  CHECK(cache.GetAll({"a"}) == std::vector<std::string>{"2"});
  CHECK_FALSE(cache.GetAll({"a", "b"}));
  CHECK(cache.stats().keys == 1);
  // A write answered with an error may land later: its stripe keeps no
  // value from then on.
  cache.WriteSent({"a"});
  cache.WriteAnswered({"a"}, /*ok=*/false);
  CHECK_FALSE(cache.Get("a"));
  t = cache.BeforeRead("a");
  CHECK_FALSE(t.clean);
  CHECK_FALSE(cache.Fill("a", "3", t));
}

TEST_CASE("read cache: bounded by bytes, emptied past the bound, and 0 keeps nothing", "[read_cache]") {
  const int64_t entry = 1 + 100 + ReadCache::kEntryOverhead;
  ReadCache cache(3 * entry);
  for (char k : std::string("abc")) cache.Fill(std::string(1, k), std::string(100, 'v'), cache.BeforeRead("x"));
  CHECK(cache.stats().keys == 3);
  CHECK(cache.stats().bytes == 3 * entry);
  cache.Fill("d", std::string(100, 'v'), cache.BeforeRead("d"));
  CHECK(cache.stats().keys == 1);
  CHECK(cache.stats().flushes == 1);
  CHECK(cache.Get("d"));
  cache.Fill("big", std::string(4 * entry, 'v'), cache.BeforeRead("big"));  // Larger than the bound.
  CHECK_FALSE(cache.Get("big"));
  cache.Fill("d", "", cache.BeforeRead("d"));  // Kept again: counted once.
  CHECK(cache.stats().bytes == 1 + ReadCache::kEntryOverhead);
  ReadCache off(0);
  off.Fill("a", "1", off.BeforeRead("a"));
  CHECK_FALSE(off.Get("a"));
  const uint64_t g = off.Generation("a");
  off.WriteSent({"a"});
  off.WriteAnswered({"a"}, true);
  CHECK(off.Generation("a") == g + 2);
}

TEST_CASE("read cache: reads of a key that meet in flight share one store call, unless a write comes between",
          "[read_cache]") {
  ReadCache cache(1 << 20);
  for (const bool write_between : {false, true}) {
    const std::string key = write_between ? "w" : "k";
    absl::Notification entered, release;
    std::atomic<int> calls{0};
    std::thread first([&] {
      ReadCache::Value v = cache.Read(key, [&]() -> ReadCache::Value {
        ++calls;
        entered.Notify();
        release.WaitForNotification();
        return std::optional<std::string>("old");
      });
      CHECK(v.ok());
      CHECK(**v == "old");
    });
    REQUIRE(entered.WaitForNotificationWithTimeout(absl::Seconds(10)));
    const int64_t shared_before = cache.stats().shared_reads;
    std::thread second([&] {
      ReadCache::Value v = cache.Read(key, [&]() -> ReadCache::Value {
        ++calls;
        return std::optional<std::string>("new");
      });
      CHECK(v.ok());
      CHECK(**v == (write_between ? "new" : "old"));
    });
    // The second waits for the first's read (a state, bounded).
    for (int i = 0; i < 10000 && cache.stats().shared_reads == shared_before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(cache.stats().shared_reads == shared_before + 1);
    if (write_between) {
      cache.WriteSent({key});  // The first's value is not kept: the second reads on its own.
      cache.WriteAnswered({key}, true);
    }
    release.Notify();
    first.join();
    second.join();
    CHECK(calls.load() == (write_between ? 2 : 1));
  }
}

TEST_CASE("agent store: a key read once is read again without a store call, and a write through it is seen at once",
          "[tcpstore]") {
  Fixture f;
  Client a(f.agent->port()), b(f.agent->port());
  a.Send(Validate());
  b.Send(Validate());
  const std::string stop(1, static_cast<char>(kStopWaiting));
  const std::string ready(1, static_cast<char>(kReady));
  b.Send(EncodeRequest(Make(Op::kSet, {"k"}, {"one"}), Dialect::kCurrent));
  b.Send(EncodeRequest(Make(Op::kSet, {"j"}, {"jay"}), Dialect::kCurrent));
  b.Send(EncodeRequest(Make(Op::kAdd, {"n"}, {}, 1), Dialect::kCurrent));  // Answered: both SETs were handled.
  REQUIRE(b.I64() == 1);
  // A get() of each (WAIT, then GET): one store call each, its value kept.
  a.Send(EncodeRequest(Make(Op::kWait, {"k"}), Dialect::kCurrent));
  REQUIRE(a.Read(1) == stop);
  a.Send(EncodeRequest(Make(Op::kGet, {"k"}), Dialect::kCurrent));
  REQUIRE(a.Value() == "one");
  a.Send(EncodeRequest(Make(Op::kGet, {"j"}), Dialect::kCurrent));
  REQUIRE(a.Value() == "jay");
  // Every other rank's get() of them, and CHECK and MULTI_GET: no store call.
  const int64_t before = StoreCalls(f);
  const int64_t cached_before = f.agent->stats().cached_reads;
  for (int i = 0; i < 10; ++i) {
    b.Send(EncodeRequest(Make(Op::kWait, {"k"}), Dialect::kCurrent));
    REQUIRE(b.Read(1) == stop);
    b.Send(EncodeRequest(Make(Op::kGet, {"k"}), Dialect::kCurrent));
    REQUIRE(b.Value() == "one");
  }
  b.Send(EncodeRequest(Make(Op::kCheck, {"k", "j"}), Dialect::kCurrent));
  CHECK(b.Read(1) == ready);
  b.Send(EncodeRequest(Make(Op::kMultiGet, {"j", "k"}), Dialect::kCurrent));
  CHECK(b.Value() == "jay");
  CHECK(b.Value() == "one");
  CHECK(StoreCalls(f) == before);
  CHECK(f.agent->stats().cached_reads - cached_before == 22);
  // A write through the agent store is seen by the next read (which reads
  // the store once, and keeps the new value).
  b.Send(EncodeRequest(Make(Op::kSet, {"k"}, {"two"}), Dialect::kCurrent));
  b.Send(EncodeRequest(Make(Op::kGet, {"k"}), Dialect::kCurrent));  // After the SET, on its connection.
  CHECK(b.Value() == "two");
  a.Send(EncodeRequest(Make(Op::kGet, {"k"}), Dialect::kCurrent));
  CHECK(a.Value() == "two");
  b.Send(EncodeRequest(Make(Op::kCompareSet, {"k"}, {"two", "three"}), Dialect::kCurrent));
  CHECK(b.Value() == "three");
  a.Send(EncodeRequest(Make(Op::kGet, {"k"}), Dialect::kCurrent));
  CHECK(a.Value() == "three");
  b.Send(EncodeRequest(Make(Op::kAppend, {"k"}, {"+"}), Dialect::kCurrent));
  b.Send(EncodeRequest(Make(Op::kGet, {"k"}), Dialect::kCurrent));
  CHECK(b.Value() == "three+");
  b.Send(EncodeRequest(Make(Op::kDeleteKey, {"k"}), Dialect::kCurrent));
  CHECK(b.I64() == 1);
  a.Send(EncodeRequest(Make(Op::kCheck, {"k"}), Dialect::kCurrent));
  CHECK(a.Read(1) == std::string(1, static_cast<char>(kNotReady)));
  CHECK(f.Logs().empty());
}

TEST_CASE("agent store: MULTI_SET, BARRIER and a refused write drop what the read cache holds, each round has its own, "
          "and it is off where not asked for",
          "[tcpstore]") {
  Fixture f;
  Client a(f.agent->port()), b(f.agent->port());
  a.Send(Validate());
  b.Send(Validate());
  const std::string stop(1, static_cast<char>(kStopWaiting));
  auto read_twice = [&](const std::string& key) {  // Two GETs of `key` by a: how many reached the server.
    const int64_t before = StoreCalls(f);
    a.Send(EncodeRequest(Make(Op::kGet, {key}), Dialect::kCurrent));
    std::string v = a.Value();
    a.Send(EncodeRequest(Make(Op::kGet, {key}), Dialect::kCurrent));
    CHECK(a.Value() == v);
    return std::make_pair(v, StoreCalls(f) - before);
  };
  // An ADD's answer on b: b's requests before it were handled (a MULTI_SET has no reply).
  int64_t syncs = 0;
  auto sync_b = [&] {
    b.Send(EncodeRequest(Make(Op::kAdd, {"sync"}, {}, 1), Dialect::kCurrent));
    REQUIRE(b.I64() == ++syncs);
  };
  b.Send(EncodeRequest(Make(Op::kMultiSet, {"m1", "m2"}, {"x", "y"}), Dialect::kCurrent));
  sync_b();
  CHECK(read_twice("m1") == std::make_pair(std::string("x"), int64_t{1}));  // The second from the cache.
  b.Send(EncodeRequest(Make(Op::kMultiSet, {"m2", "m1"}, {"y2", "x2"}), Dialect::kCurrent));
  sync_b();
  CHECK(read_twice("m1").first == "x2");
  // A BARRIER's arrival is an ADD to its key.
  b.Send(EncodeRequest(Make(Op::kBarrier, {"bar"}, {}, 1), Dialect::kCurrent));
  REQUIRE(b.Read(1) == stop);
  CHECK(read_twice("bar").first == "1");
  b.Send(EncodeRequest(Make(Op::kBarrier, {"bar"}, {}, 1), Dialect::kCurrent));
  REQUIRE(b.Read(1) == stop);
  CHECK(read_twice("bar").first == "2");
  // A write the store refuses (a value over its max_value_bytes) closes its
  // connection; its outcome counts as unknown, so the key is not cached
  // again this round: both reads reach the server.
  CHECK(read_twice("big") == std::make_pair(std::string(), int64_t{2}));  // Absent: never cached.
  b.Send(EncodeRequest(Make(Op::kSet, {"m1"}, {std::string((1 << 20) + 1, 'v')}), Dialect::kCurrent));
  CHECK(b.Closed());
  CHECK(read_twice("m1") == std::make_pair(std::string("x2"), int64_t{2}));
  CHECK(read_twice("m2") == std::make_pair(std::string("y2"), int64_t{1}));
  REQUIRE(f.store->Set("m2", "direct").ok());  // Not through the agent store: the cache still has y2.
  CHECK(read_twice("m2") == std::make_pair(std::string("y2"), int64_t{0}));
  // A new round (here over the same store): a new cache, the old round's values gone.
  f.agent->SetStore(f.store, std::make_shared<PrefixStore>("internal", f.store));
  CHECK(read_twice("m2") == std::make_pair(std::string("direct"), int64_t{1}));
  // Where the read cache is not asked for (not node rank 0), every read reaches the server.
  f.agent->SetStore(f.store, std::make_shared<PrefixStore>("internal", f.store), /*read_cache=*/false);
  CHECK(read_twice("m2") == std::make_pair(std::string("direct"), int64_t{2}));
  CHECK(f.Logs().find("agent store: SET 'm1'") != std::string::npos);
}

TEST_CASE("agent store: the read cache never answers a value older than an acknowledged write (linearizable reads)",
          "[tcpstore]") {
  // One writer ADDs to a counter, one acknowledged add at a time, and
  // publishes each answer; readers GET it (and get() it: WAIT, GET) in a
  // loop. A reader's answer must be at least the last value acknowledged
  // before its request was sent: a cached value that outlived a write
  // would be older.
  Fixture f;
  constexpr int kAdds = 1500;
  std::atomic<int64_t> acked{0};
  std::atomic<bool> done{false};
  std::atomic<int> stale{0}, reads{0};
  {
    Client w(f.agent->port());
    w.Send(Validate());
    w.Send(EncodeRequest(Make(Op::kAdd, {"c"}, {}, 0), Dialect::kCurrent));
    REQUIRE(w.I64() == 0);
  }
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back([&, i] {
      Client r(f.agent->port());
      r.Send(Validate());
      while (!done.load()) {
        const int64_t floor = acked.load();
        if (i == 0) {
          r.Send(EncodeRequest(Make(Op::kWait, {"c"}), Dialect::kCurrent));
          if (r.Read(1) != std::string(1, static_cast<char>(kStopWaiting))) break;
        }
        r.Send(EncodeRequest(Make(Op::kGet, {"c"}), Dialect::kCurrent));
        int64_t v = -1;
        if (!absl::SimpleAtoi(r.Value(), &v) || v < floor) ++stale;
        ++reads;
      }
    });
  }
  {
    Client w(f.agent->port());
    w.Send(Validate());
    for (int i = 1; i <= kAdds; ++i) {
      w.Send(EncodeRequest(Make(Op::kAdd, {"c"}, {}, 1), Dialect::kCurrent));
      const int64_t v = w.I64();
      REQUIRE(v == i);
      acked.store(v);
      if (i % 10 == 0) {
        // A quiet moment between writes, so that reads are kept and
        // answered from the cache too: until the readers have read 9 times
        // since this add (bounded).
        const int seen = reads.load();
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (reads.load() < seen + 9 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      }
    }
  }
  done.store(true);
  for (std::thread& t : readers) t.join();
  CHECK(stale.load() == 0);
  CHECK(reads.load() > kAdds);
  CHECK(f.agent->stats().cached_reads > 0);  // The cache answered some of them.
  CHECK(f.Logs().empty());
}
