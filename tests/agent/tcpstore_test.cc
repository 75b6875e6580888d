// torchrun's agent store: PyTorch's TCPStore protocol (agent/tcpstore/), the
// parser alone, and the server over a real rendezvous server's store, spoken
// to over real sockets.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "tests/agent/tcpstore_fixture.h"
#include "tests/support/parked_reads.h"

using namespace meshrun;
using meshrun::testing::ParkedReads;
using namespace meshrun::agent::tcpstore;
using namespace meshrun::testing::tcpstore;


TEST_CASE("TCPStore protocol: both dialects parse, byte by byte, and each request round-trips", "[tcpstore]") {
  const std::vector<Request> all = {
      Make(Op::kSet, {"k"}, {"v"}),         Make(Op::kCompareSet, {"k"}, {"", "x"}), Make(Op::kGet, {"k"}),
      Make(Op::kAdd, {"n"}, {}, -7),         Make(Op::kCheck, {"a", "b"}),            Make(Op::kWait, {"a"}),
      Make(Op::kNumKeys),                    Make(Op::kDeleteKey, {"k"}),             Make(Op::kAppend, {"k"}, {"tail"}),
      Make(Op::kMultiGet, {"a", "b", "c"}),  Make(Op::kMultiSet, {"a", "b"}, {"1", std::string(3, '\0')}),
      Make(Op::kCancelWait)};
  for (Dialect d : {Dialect::kCurrent, Dialect::kLegacy}) {
    std::string stream = d == Dialect::kCurrent ? Validate() : "";
    for (const Request& r : all) stream += EncodeRequest(r, d);
    RequestParser p;
    std::vector<Request> got;
    for (char ch : stream) {  // One byte at a time: no request before its last byte.
      p.Feed(absl::string_view(&ch, 1));
      for (;;) {
        auto n = p.Next();
        REQUIRE(n.ok());
        if (!n->has_value()) break;
        got.push_back(**n);
      }
    }
    CHECK(p.dialect() == d);
    if (d == Dialect::kCurrent) {
      REQUIRE(!got.empty());
      CHECK(got.front().op == Op::kValidate);
      got.erase(got.begin());
    }
    REQUIRE(got.size() == all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      INFO(OpName(all[i].op));
      CHECK(got[i].op == all[i].op);
      CHECK(got[i].keys == all[i].keys);
      CHECK(got[i].values == all[i].values);
      CHECK(got[i].number == all[i].number);
    }
    CHECK(p.buffered() == 0);
  }
}

TEST_CASE("TCPStore protocol: oversized fields and unknown types are refused before their bytes arrive", "[tcpstore]") {
  Limits small;
  small.max_key_bytes = 16;
  small.max_value_bytes = 32;
  small.max_keys = 4;
  SECTION("a key length past max_key_bytes") {
    RequestParser p(small);
    std::string req = Validate() + EncodeRequest(Make(Op::kGet, {std::string(17, 'k')}), Dialect::kCurrent);
    p.Feed(req.substr(0, 5 + 1 + 8));  // VALIDATE, GET's type and the length only.
    auto v = p.Next();
    REQUIRE(v.ok());
    auto n = p.Next();
    REQUIRE_FALSE(n.ok());
    CHECK(std::string(n.status().message()) == "GET: a key of 17 bytes; at most 16 allowed");
  }
  SECTION("a value past max_value_bytes") {
    RequestParser p(small);
    p.Feed(EncodeRequest(Make(Op::kSet, {"k"}, {std::string(33, 'v')}), Dialect::kLegacy));
    auto n = p.Next();
    REQUIRE_FALSE(n.ok());
    CHECK(std::string(n.status().message()).find("a value of 33 bytes; at most 32") != std::string::npos);
  }
  SECTION("more keys than max_keys") {
    RequestParser p(small);
    p.Feed(Validate() + EncodeRequest(Make(Op::kWait, {"a", "b", "c", "d", "e"}), Dialect::kCurrent));
    REQUIRE(p.Next().ok());
    auto n = p.Next();
    REQUIRE_FALSE(n.ok());
    CHECK(std::string(n.status().message()) == "WAIT: 5 keys in one request; at most 4 allowed");
  }
  SECTION("an unknown query type") {
    RequestParser p;
    p.Feed(Validate() + std::string(1, static_cast<char>(77)));
    REQUIRE(p.Next().ok());
    auto n = p.Next();
    REQUIRE_FALSE(n.ok());
    CHECK(std::string(n.status().message()) == "unknown TCPStore query type 77 (PyTorch 2.x numbering, 0..18)");
  }
}

TEST_CASE("agent store: requests reach meshrun's store, a WAIT is answered by another connection's SET", "[tcpstore]") {
  Fixture f;
  Client a(f.agent->port()), b(f.agent->port());
  a.Send(Validate());
  b.Send(Validate());
  a.Send(EncodeRequest(Make(Op::kWait, {"late"}), Dialect::kCurrent));
  CHECK(a.Read(1, 0.3).empty());  // Not set yet: no answer.
  b.Send(EncodeRequest(Make(Op::kSet, {"late"}, {"here"}), Dialect::kCurrent));
  CHECK(a.Read(1) == std::string(1, static_cast<char>(kStopWaiting)));
  a.Send(EncodeRequest(Make(Op::kGet, {"late"}), Dialect::kCurrent));
  CHECK(a.Value() == "here");
  // The key is in meshrun's store itself.
  auto v = f.store->Get("late", absl::ZeroDuration());
  REQUIRE(v.ok());
  CHECK(*v == "here");
  a.Send(EncodeRequest(Make(Op::kAdd, {"n"}, {}, 41), Dialect::kCurrent));
  CHECK(a.I64() == 41);
  auto n = f.store->Get("n", absl::ZeroDuration());
  REQUIRE(n.ok());
  CHECK(*n == "41");
}


TEST_CASE("agent store: concurrent APPENDs of the same text all land", "[tcpstore]") {
  // Each APPEND is a read and a compare-set in meshrun's store: one that
  // finds its result already stored by another APPEND of the same text has
  // not appended yet, and tries again.
  Fixture f;
  constexpr int kClients = 4, kAppends = 300;
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(std::make_unique<Client>(f.agent->port()));
    clients.back()->Send(Validate());
  }
  const std::string append = EncodeRequest(Make(Op::kAppend, {"log"}, {"x"}), Dialect::kCurrent);
  for (int i = 0; i < kAppends; ++i) {
    for (auto& c : clients) c->Send(append);
  }
  // A connection's requests are served in order: its ADD's answer follows its APPENDs.
  for (auto& c : clients) {
    c->Send(EncodeRequest(Make(Op::kAdd, {"done"}, {}, 1), Dialect::kCurrent));
    CHECK(c->I64() >= 1);
  }
  clients[0]->Send(EncodeRequest(Make(Op::kGet, {"log"}), Dialect::kCurrent));
  CHECK(clients[0]->Value() == std::string(kClients * kAppends, 'x'));
}

TEST_CASE("agent store: a get()'s WAIT and GET are one store call, and never miss a write between them",
          "[tcpstore]") {
  AgentStoreOptions o;
  o.read_cache_bytes = 0;  // The fold alone (the read cache: tcpstore_cache_test.cc).
  Fixture f(o);
  Client a(f.agent->port()), b(f.agent->port());
  a.Send(Validate());
  b.Send(Validate());
  const std::string stop(1, static_cast<char>(kStopWaiting));
  auto settled = [&](Client& c) {  // Every earlier request of `c` handled (a CHECK's answer).
    c.Send(EncodeRequest(Make(Op::kCheck, {"k"}), Dialect::kCurrent));
    REQUIRE(c.Read(1).size() == 1);
  };
  b.Send(EncodeRequest(Make(Op::kSet, {"k"}, {"one"}), Dialect::kCurrent));
  settled(b);
  // What PyTorch's get() sends: WAIT, then GET of the same key. One store call (the WAIT's
  // read), not two.
  const int64_t before = StoreCalls(f);
  a.Send(EncodeRequest(Make(Op::kWait, {"k"}), Dialect::kCurrent));
  REQUIRE(a.Read(1) == stop);
  a.Send(EncodeRequest(Make(Op::kGet, {"k"}), Dialect::kCurrent));
  CHECK(a.Value() == "one");
  CHECK(StoreCalls(f) - before == 1);
  CHECK(f.agent->stats().folded_gets == 1);
  // A write between the WAIT and the GET (another client's, through this agent store): the
  // GET reads the store again and sees it.
  a.Send(EncodeRequest(Make(Op::kWait, {"k"}), Dialect::kCurrent));
  REQUIRE(a.Read(1) == stop);
  b.Send(EncodeRequest(Make(Op::kSet, {"k"}, {"two"}), Dialect::kCurrent));
  settled(b);
  a.Send(EncodeRequest(Make(Op::kGet, {"k"}), Dialect::kCurrent));
  CHECK(a.Value() == "two");
  // A GET that is not the next request after its WAIT reads the store too.
  a.Send(EncodeRequest(Make(Op::kWait, {"k"}), Dialect::kCurrent));
  REQUIRE(a.Read(1) == stop);
  REQUIRE(f.store->Set("k", "three").ok());  // Not through the agent store at all.
  settled(a);
  a.Send(EncodeRequest(Make(Op::kGet, {"k"}), Dialect::kCurrent));
  CHECK(a.Value() == "three");
  // A WAIT that waited was released by a write through this agent store, after its read was
  // sent: its GET reads the store (what it reads is the same; the rule holds for any client).
  a.Send(EncodeRequest(Make(Op::kWait, {"late"}), Dialect::kCurrent));
  CHECK(a.Read(1, 0.3).empty());  // Not set yet (a bounded window for a negative).
  b.Send(EncodeRequest(Make(Op::kSet, {"late"}, {"here"}), Dialect::kCurrent));
  REQUIRE(a.Read(1) == stop);
  a.Send(EncodeRequest(Make(Op::kGet, {"late"}), Dialect::kCurrent));
  CHECK(a.Value() == "here");
  CHECK(f.agent->stats().folded_gets == 1);
}

TEST_CASE("agent store: the values WAITs keep for their GETs stay within max_buffered_bytes, all connections together",
          "[tcpstore]") {
  // A client may WAIT and send nothing more: its connection keeps the value read. Two of
  // 40,003 bytes fit in 100,000, a third does not; its GET reads the store.
  AgentStoreOptions o;
  o.read_cache_bytes = 0;
  o.max_buffered_bytes = 100000;
  Fixture f(o);
  const std::string big(40000, 'v');
  REQUIRE(f.store->Set("big", big).ok());
  const std::string stop(1, static_cast<char>(kStopWaiting));
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < 3; ++c) {
    clients.push_back(std::make_unique<Client>(f.agent->port()));
    clients.back()->Send(Validate());
    clients.back()->Send(EncodeRequest(Make(Op::kWait, {"big"}), Dialect::kCurrent));
    REQUIRE(clients.back()->Read(1) == stop);
  }
  CHECK(f.agent->stats().folded_bytes == 2 * 40003);
  const int64_t before = StoreCalls(f);
  for (auto& c : clients) {
    c->Send(EncodeRequest(Make(Op::kGet, {"big"}), Dialect::kCurrent));
    CHECK(c->Value() == big);
  }
  CHECK(f.agent->stats().folded_gets == 2);
  CHECK(StoreCalls(f) - before == 1);  // The third GET's.
  CHECK(f.agent->stats().folded_bytes == 0);
}

TEST_CASE("agent store: BARRIER holds each arrival until the world size has arrived, and a key used again passes",
          "[tcpstore]") {
  Fixture f;
  // The clients' keys and the agent store's own apart, as the agent sets them.
  f.agent->SetStore(std::make_shared<PrefixStore>(kAgentStorePrefix, f.store),
                    std::make_shared<PrefixStore>(kAgentStoreInternalPrefix, f.store));
  Client a(f.agent->port()), b(f.agent->port()), c(f.agent->port());
  for (Client* x : {&a, &b, &c}) x->Send(Validate());
  a.Send(EncodeRequest(Make(Op::kBarrier, {"b"}, {}, 3), Dialect::kCurrent));
  b.Send(EncodeRequest(Make(Op::kBarrier, {"b"}, {}, 3), Dialect::kCurrent));
  // Two of three arrived: neither is answered (a bounded window for a negative).
  CHECK(a.Read(1, 0.3).empty());
  CHECK(b.Read(1, 0.1).empty());
  c.Send(EncodeRequest(Make(Op::kBarrier, {"b"}, {}, 3), Dialect::kCurrent));
  const std::string stop(1, static_cast<char>(kStopWaiting));
  CHECK(c.Read(1) == stop);
  CHECK(a.Read(1) == stop);
  CHECK(b.Read(1) == stop);
  // The key counts arrivals, as ADD's decimal text; the next use of it passes at once.
  a.Send(EncodeRequest(Make(Op::kBarrier, {"b"}, {}, 3), Dialect::kCurrent));
  CHECK(a.Read(1) == stop);
  a.Send(EncodeRequest(Make(Op::kGet, {"b"}), Dialect::kCurrent));
  CHECK(a.Value() == "4");
  // Used again with a larger world size: it waits until the count reaches it (4 of 6 now).
  b.Send(EncodeRequest(Make(Op::kBarrier, {"b"}, {}, 6), Dialect::kCurrent));
  CHECK(b.Read(1, 0.3).empty());
  c.Send(EncodeRequest(Make(Op::kBarrier, {"b"}, {}, 6), Dialect::kCurrent));
  CHECK(c.Read(1) == stop);
  CHECK(b.Read(1) == stop);
  // A world of 1 passes alone, and the connection serves on.
  b.Send(EncodeRequest(Make(Op::kBarrier, {"solo"}, {}, 1), Dialect::kCurrent));
  CHECK(b.Read(1) == stop);
  b.Send(EncodeRequest(Make(Op::kAdd, {"n"}, {}, 2), Dialect::kCurrent));
  CHECK(b.I64() == 2);
  // No key a client sets releases a barrier (its releases are kept apart).
  for (const char* k : {"u/.meshrun_barrier_released", "barrier/2/u", "../torch-internal/barrier/2/u"}) {
    b.Send(EncodeRequest(Make(Op::kSet, {k}, {"1"}), Dialect::kCurrent));
  }
  a.Send(EncodeRequest(Make(Op::kBarrier, {"u"}, {}, 2), Dialect::kCurrent));
  CHECK(a.Read(1, 0.3).empty());
}

TEST_CASE("agent store: a BARRIER refused at the WAITs' bound is not counted as an arrival", "[tcpstore]") {
  AgentStoreOptions o;
  o.max_waits = 1;
  Fixture f(o);
  Client a(f.agent->port()), b(f.agent->port());
  a.Send(Validate());
  b.Send(Validate());
  a.Send(EncodeRequest(Make(Op::kBarrier, {"lim"}, {}, 3), Dialect::kCurrent));
  CHECK(a.Read(1, 0.3).empty());  // Waits: the one WAIT allowed.
  b.Send(EncodeRequest(Make(Op::kBarrier, {"lim"}, {}, 3), Dialect::kCurrent));
  CHECK(b.Closed());  // Past agent_store_max_waits: refused, its connection closed.
  auto n = f.store->Get("lim", absl::ZeroDuration());
  REQUIRE(n.ok());
  CHECK(*n == "1");  // Only the admitted arrival counts.
  CHECK(f.Logs().find("agent store: BARRIER from 127.0.0.1:") != std::string::npos);
}

TEST_CASE("agent store: CANCEL_WAIT is answered at once, and the connection serves on", "[tcpstore]") {
  AgentStoreOptions o;
  o.wait_slice = absl::Seconds(30);  // Longer than the test: the answer cannot come from a slice's end.
  Fixture f(o);
  Client c(f.agent->port());
  c.Send(Validate());
  c.Send(EncodeRequest(Make(Op::kWait, {"never"}), Dialect::kCurrent));
  CHECK(c.Read(1, 0.3).empty());
  const auto t0 = std::chrono::steady_clock::now();
  c.Send(EncodeRequest(Make(Op::kCancelWait), Dialect::kCurrent));
  CHECK(c.Read(1, 5) == std::string(1, static_cast<char>(kWaitCanceled)));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  // Setting the key now answers nothing more (that wait is over).
  REQUIRE(f.store->Set("never", "x").ok());
  c.Send(EncodeRequest(Make(Op::kCheck, {"never"}), Dialect::kCurrent));
  CHECK(c.Read(1) == std::string(1, static_cast<char>(kReady)));
  Request ping;
  ping.op = Op::kPing;
  ping.nonce = 1234;
  c.Send(EncodeRequest(ping, Dialect::kCurrent));
  std::string echo = c.Read(4);
  REQUIRE(echo.size() == 4);
  uint32_t nonce = 0;
  std::memcpy(&nonce, echo.data(), 4);
  CHECK(nonce == 1234);
}

TEST_CASE("agent store: an unserved request, a bad one and one past max_connections close their connection, naming why",
          "[tcpstore]") {
  AgentStoreOptions o;
  o.max_connections = 2;
  Fixture f(o);
  {
    Client c(f.agent->port());
    c.Send(EncodeRequest(Make(Op::kWatchKey, {"w"}), Dialect::kLegacy));
    CHECK(c.Closed());
  }
  {
    Client c(f.agent->port());
    c.Send(Validate() + std::string(1, static_cast<char>(99)));
    CHECK(c.Closed());
  }
  Client one(f.agent->port()), two(f.agent->port());
  one.Send(Validate());
  two.Send(Validate());
  // Both are served before a third arrives.
  for (Client* c : {&one, &two}) {
    c->Send(EncodeRequest(Make(Op::kAdd, {"c"}, {}, 1), Dialect::kCurrent));
    CHECK(c->I64() > 0);
  }
  Client three(f.agent->port());
  CHECK(three.Closed());
  const std::string logs = f.Logs();
  CHECK(logs.find("WATCH_KEY 'w' from 127.0.0.1:") != std::string::npos);
  CHECK(logs.find("is not served by meshrun's agent store") != std::string::npos);
  CHECK(logs.find("unknown TCPStore query type 99") != std::string::npos);
  CHECK(logs.find("2 are open (agent_store_max_connections)") != std::string::npos);
  CHECK(f.agent->stats().refused == 1);
}

TEST_CASE("agent store: partial requests on all connections together stay within max_buffered_bytes", "[tcpstore]") {
  AgentStoreOptions o;
  o.max_buffered_bytes = 4096;
  Fixture f(o);
  // A SET whose 3,000-byte value has not all arrived: its bytes are held.
  const std::string set1 = EncodeRequest(Make(Op::kSet, {"big1"}, {std::string(3000, 'a')}), Dialect::kCurrent);
  Client a(f.agent->port());
  a.Send(Validate() + set1.substr(0, 2500));
  // Wait for the state: the server holds a's partial request.
  for (int i = 0; i < 500 && f.agent->stats().buffered_bytes < 2500; ++i) usleep(10000);
  REQUIRE(f.agent->stats().buffered_bytes >= 2500);
  // Another connection's partial request would pass the bound: closed.
  const std::string set2 = EncodeRequest(Make(Op::kSet, {"big2"}, {std::string(3000, 'b')}), Dialect::kCurrent);
  Client b(f.agent->port());
  b.Send(Validate() + set2.substr(0, 2500));
  CHECK(b.Closed());
  CHECK(f.Logs().find("would pass 4096 bytes (agent_store_max_buffered_bytes)") != std::string::npos);
  // The first completes and is served; nothing stays held.
  a.Send(set1.substr(2500));
  a.Send(EncodeRequest(Make(Op::kGet, {"big1"}), Dialect::kCurrent));
  CHECK(a.Value() == std::string(3000, 'a'));
  CHECK(f.agent->stats().buffered_bytes == 0);
}

TEST_CASE("agent store: WAITs are bounded per connection and in all, and a refused one closes only its connection",
          "[tcpstore]") {
  AgentStoreOptions o;
  // Canceled waits stay in the store for each section (well under a
  // second), and the agent's end waits for them: a short slice.
  o.wait_slice = absl::Seconds(5);
  o.max_canceled_waits = 2;
  o.max_waits = 4;
  Fixture f(o);
  const std::string wait = EncodeRequest(Make(Op::kWait, {"never"}), Dialect::kCurrent);
  const std::string cancel = EncodeRequest(Make(Op::kCancelWait), Dialect::kCurrent);
  SECTION("a second WAIT while the first is in progress cancels the first (PyTorch 1.x sends no CANCEL_WAIT)") {
    Client c(f.agent->port());
    c.Send(Validate() + wait);
    CHECK(c.Read(1, 0.3).empty());
    c.Send(EncodeRequest(Make(Op::kWait, {"other"}), Dialect::kCurrent));
    REQUIRE(f.store->Set("never", "now").ok());  // The first's key: no reply for it.
    CHECK(c.Read(1, 0.5).empty());
    REQUIRE(f.store->Set("other", "now").ok());
    CHECK(c.Read(1) == std::string(1, static_cast<char>(kStopWaiting)));
    CHECK(c.Read(1, 0.3).empty());  // Exactly one reply.
  }
  SECTION("canceled WAITs still in the store, per connection") {
    Client c(f.agent->port());
    c.Send(Validate());
    for (int i = 0; i < 2; ++i) {
      c.Send(wait);
      // Wait for the state: the WAIT is parked in the server's store.
      for (int t = 0; t < 500 && ParkedReads(f.server->endpoint(), "tcpstore") < i + 1; ++t) usleep(10000);
      REQUIRE(ParkedReads(f.server->endpoint(), "tcpstore") == i + 1);
      c.Send(cancel);
      CHECK(c.Read(1) == std::string(1, static_cast<char>(kWaitCanceled)));
    }
    CHECK(f.agent->stats().waits == 2);  // Both still in the store, canceled.
    c.Send(wait);
    CHECK(c.Closed());
    CHECK(f.Logs().find("2 canceled WAITs of this connection are still in the store (at most 2)") != std::string::npos);
  }
  SECTION("all connections together") {
    std::vector<std::unique_ptr<Client>> held;
    for (int i = 0; i < 4; ++i) {
      held.push_back(std::make_unique<Client>(f.agent->port()));
      held.back()->Send(Validate() + wait);
    }
    for (int i = 0; i < 500 && f.agent->stats().waits < 4; ++i) usleep(10000);
    REQUIRE(f.agent->stats().waits == 4);
    Client fifth(f.agent->port());
    fifth.Send(Validate() + wait);
    CHECK(fifth.Closed());
    CHECK(f.Logs().find("4 WAITs are in the store (agent_store_max_waits)") != std::string::npos);
    // The others still wait, and are answered when the key is set.
    REQUIRE(f.store->Set("never", "now").ok());
    for (auto& c : held) CHECK(c->Read(1) == std::string(1, static_cast<char>(kStopWaiting)));
  }
  // Other connections are served throughout.
  Client other(f.agent->port());
  Request ping;
  ping.op = Op::kPing;
  ping.nonce = 77;
  other.Send(Validate() + EncodeRequest(ping, Dialect::kCurrent));
  CHECK(other.Read(4).size() == 4);
}

TEST_CASE("agent store: a client's WAITs one after the other, each sent as soon as the last is answered", "[tcpstore]") {
  Fixture f;
  Client c(f.agent->port());
  c.Send(Validate());
  // 200 WAITs on keys already set: each answered at once, the next sent at
  // once (before the last waiter's thread has ended).
  REQUIRE(f.store->Set("ready", "1").ok());
  const std::string wait = EncodeRequest(Make(Op::kWait, {"ready"}), Dialect::kCurrent);
  for (int i = 0; i < 200; ++i) {
    c.Send(wait);
    REQUIRE(c.Read(1) == std::string(1, static_cast<char>(kStopWaiting)));
  }
  CHECK(f.Logs().empty());
}
