// The agent store's queues (agent/tcpstore/queues.h): QUEUE_PUSH, QUEUE_POP
// and QUEUE_LEN over a real rendezvous server's store, and the WAIT of a
// blocking pop; GETNUMKEYS and LIST_KEYS, which see keys and not queues.
// Spoken to over real sockets as PyTorch 2.x's client does.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <string>

#include "tests/agent/tcpstore_fixture.h"

using namespace meshrun;
using namespace meshrun::agent::tcpstore;
using namespace meshrun::testing::tcpstore;

namespace {

std::string Send1(Op op, const std::string& key, const std::string& value = "") {
  return EncodeRequest(Make(op, {key}, value.empty() && op != Op::kQueuePush ? std::vector<std::string>{}
                                                                               : std::vector<std::string>{value}),
                       Dialect::kCurrent);
}

const std::string kStop(1, static_cast<char>(kStopWaiting));

}  // namespace

TEST_CASE("agent store: a queue pops in push order, answers its length, and is apart from the key of its name",
          "[tcpstore]") {
  Fixture f;
  Client c(f.agent->port());
  c.Send(Validate());
  c.Send(Send1(Op::kQueueLen, "q"));
  CHECK(c.I64() == 0);  // Never pushed to.
  c.Send(Send1(Op::kQueuePush, "q", "first") + Send1(Op::kQueuePush, "q", "") + Send1(Op::kQueuePush, "q", "third"));
  c.Send(Send1(Op::kQueueLen, "q"));
  CHECK(c.I64() == 3);
  // CHECK sees a queue holding an item as ready; the key "q" itself is not set.
  c.Send(EncodeRequest(Make(Op::kCheck, {"q"}), Dialect::kCurrent));
  CHECK(c.Read(1) == std::string(1, static_cast<char>(kReady)));
  c.Send(Send1(Op::kGet, "q"));
  CHECK(c.Value().empty());
  c.Send(Send1(Op::kDeleteKey, "q"));
  CHECK(c.I64() == 0);
  // Each pop answers the length before it, then the item (PyTorch's server's reply).
  for (const auto& [len, item] : std::vector<std::pair<int64_t, std::string>>{{3, "first"}, {2, ""}, {1, "third"}}) {
    c.Send(Send1(Op::kQueuePop, "q"));
    CHECK(c.I64() == len);
    CHECK(c.Value() == item);
  }
  c.Send(Send1(Op::kQueuePop, "q"));
  CHECK(c.I64() == 0);  // Empty: the length alone (the client raises QueueEmptyError).
  c.Send(EncodeRequest(Make(Op::kCheck, {"q"}), Dialect::kCurrent));
  CHECK(c.Read(1) == std::string(1, static_cast<char>(kNotReady)));
  // Setting the key "q" leaves the queue empty, and makes CHECK ready.
  c.Send(EncodeRequest(Make(Op::kSet, {"q"}, {"key"}), Dialect::kCurrent));
  c.Send(Send1(Op::kQueueLen, "q"));
  CHECK(c.I64() == 0);
  c.Send(EncodeRequest(Make(Op::kCheck, {"q"}), Dialect::kCurrent));
  CHECK(c.Read(1) == std::string(1, static_cast<char>(kReady)));
  // The items lived in meshrun's store (the internal namespace), and popped ones are gone from it.
  auto tail = f.store->Get("internal/" + QueueTailKey("q"), absl::ZeroDuration());
  REQUIRE(tail.ok());
  CHECK(*tail == "3");
  CHECK(absl::IsNotFound(f.store->Get("internal/" + QueueItemKey("q", 0), absl::ZeroDuration()).status()));
  CHECK(f.Logs().empty());
}

TEST_CASE("agent store: each push releases one blocking pop's WAIT, oldest first, long before the WAIT's slice ends",
          "[tcpstore]") {
  AgentStoreOptions o;
  o.wait_slice = absl::Seconds(4);  // A release by the slice's end would take 4 s; each below takes < 2 s.
  Fixture f(o);
  Client a(f.agent->port()), b(f.agent->port()), pusher(f.agent->port());
  for (Client* x : {&a, &b, &pusher}) x->Send(Validate());
  // Both wait before the queue was ever pushed to: WAITs in the store. A's
  // waiter is registered before b's WAIT is sent (arrival alone does not
  // order them: each first reads the key on its own connection's thread).
  auto registered = [&](int64_t n) {
    for (int i = 0; i < 500 && f.agent->stats().push_waiters < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return f.agent->stats().push_waiters == n;
  };
  a.Send(EncodeRequest(Make(Op::kWait, {"jobs"}), Dialect::kCurrent));
  REQUIRE(registered(1));
  b.Send(EncodeRequest(Make(Op::kWait, {"jobs"}), Dialect::kCurrent));
  REQUIRE(registered(2));
  REQUIRE(f.agent->stats().waits == 2);
  auto t0 = std::chrono::steady_clock::now();
  pusher.Send(Send1(Op::kQueuePush, "jobs", "one"));
  CHECK(a.Read(1, 2) == kStop);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  CHECK(b.Read(1, 0.3).empty());  // One push, one release.
  a.Send(Send1(Op::kQueuePop, "jobs"));
  CHECK(a.I64() == 1);
  CHECK(a.Value() == "one");
  t0 = std::chrono::steady_clock::now();
  pusher.Send(Send1(Op::kQueuePush, "jobs", "two"));
  CHECK(b.Read(1, 2) == kStop);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  b.Send(Send1(Op::kQueuePop, "jobs"));
  CHECK(b.I64() == 1);
  CHECK(b.Value() == "two");
  // A known queue, empty: the next blocking pop waits here, not in the store, and a push releases it.
  a.Send(EncodeRequest(Make(Op::kWait, {"jobs"}), Dialect::kCurrent));
  CHECK(a.Read(1, 0.3).empty());
  REQUIRE(registered(1));
  t0 = std::chrono::steady_clock::now();
  pusher.Send(Send1(Op::kQueuePush, "jobs", "three"));
  CHECK(a.Read(1, 2) == kStop);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  // A WAIT on a queue that holds an item is answered at once.
  b.Send(EncodeRequest(Make(Op::kWait, {"jobs"}), Dialect::kCurrent));
  CHECK(b.Read(1, 2) == kStop);
  // 100 pops in a row, each a WAIT released by its push: no WAIT is left
  // behind to hold the connection (at most 64 canceled ones each).
  for (int i = 0; i < 100; ++i) {
    b.Send(Send1(Op::kQueuePop, "jobs"));
    REQUIRE(b.I64() == 1);
    REQUIRE(!b.Value().empty());
    b.Send(EncodeRequest(Make(Op::kWait, {"jobs"}), Dialect::kCurrent));
    pusher.Send(Send1(Op::kQueuePush, "jobs", std::to_string(i)));
    REQUIRE(b.Read(1, 2) == kStop);
  }
  CHECK(f.Logs().empty());
}

TEST_CASE("agent store: GETNUMKEYS counts and LIST_KEYS lists the round's keys of its namespace, up to max_listed_keys",
          "[tcpstore]") {
  AgentStoreOptions o;
  o.max_listed_keys = 3;
  Fixture f(o);
  // The clients' keys and the agent store's own apart, as the agent sets them.
  f.agent->SetStore(std::make_shared<PrefixStore>(kAgentStorePrefix, f.store),
                    std::make_shared<PrefixStore>(kAgentStoreInternalPrefix, f.store));
  REQUIRE(f.store->Set("mesh/not-a-client-key", "x").ok());
  Client c(f.agent->port());
  c.Send(Validate());
  c.Send(EncodeRequest(Make(Op::kNumKeys), Dialect::kCurrent));
  CHECK(c.I64() == 0);
  c.Send(EncodeRequest(Make(Op::kSet, {"a"}, {"1"}), Dialect::kCurrent) +
         EncodeRequest(Make(Op::kAdd, {"b/n"}, {}, 1), Dialect::kCurrent));
  CHECK(c.I64() == 1);
  c.Send(Send1(Op::kQueuePush, "q", "not a key"));  // Queues are not keys.
  c.Send(EncodeRequest(Make(Op::kBarrier, {"bar"}, {}, 1), Dialect::kCurrent));  // Its count is a key; its release is not.
  CHECK(c.Read(1) == kStop);
  c.Send(EncodeRequest(Make(Op::kNumKeys), Dialect::kCurrent));
  CHECK(c.I64() == 3);
  c.Send(EncodeRequest(Make(Op::kListKeys), Dialect::kCurrent));
  REQUIRE(c.I64() == 3);
  std::vector<std::string> keys;
  for (int i = 0; i < 3; ++i) keys.push_back(c.Value());
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"a", "b/n", "bar"});
  // A fourth key: more than max_listed_keys, so LIST_KEYS closes its connection, naming the bound.
  c.Send(EncodeRequest(Make(Op::kSet, {"d"}, {"1"}), Dialect::kCurrent));
  c.Send(EncodeRequest(Make(Op::kNumKeys), Dialect::kCurrent));
  CHECK(c.I64() == 4);
  c.Send(EncodeRequest(Make(Op::kListKeys), Dialect::kCurrent));
  CHECK(c.Closed());
  CHECK(f.Logs().find("4 keys of round 0 start with 'torch/', more than the 3 asked for (agent_store_max_listed_keys)") !=
        std::string::npos);
}

TEST_CASE("agent store: a WAIT on an empty queue's name is released at once by a SET of that name as a key",
          "[tcpstore]") {
  AgentStoreOptions o;
  o.wait_slice = absl::Seconds(4);  // A release by the slice's end would take 4 s.
  Fixture f(o);
  Client a(f.agent->port()), b(f.agent->port());
  a.Send(Validate());
  b.Send(Validate());
  // "wq" is a known queue, empty again: a WAIT on it waits for a push, or for the key.
  b.Send(Send1(Op::kQueuePush, "wq", "1") + Send1(Op::kQueuePop, "wq"));
  CHECK(b.I64() == 1);
  CHECK(b.Value() == "1");
  // SET, then (the key deleted again) ADD: each releases the WAIT at once.
  for (const Request& write : {Make(Op::kSet, {"wq"}, {"7"}), Make(Op::kAdd, {"wq"}, {}, 1)}) {
    a.Send(EncodeRequest(Make(Op::kWait, {"wq"}), Dialect::kCurrent));
    CHECK(a.Read(1, 0.3).empty());
    const auto t0 = std::chrono::steady_clock::now();
    b.Send(EncodeRequest(write, Dialect::kCurrent));
    CHECK(a.Read(1, 2) == kStop);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
    if (write.op == Op::kAdd) CHECK(b.I64() == 1);
    b.Send(Send1(Op::kDeleteKey, "wq"));
    CHECK(b.I64() == 1);
  }
  CHECK(f.Logs().empty());
}
