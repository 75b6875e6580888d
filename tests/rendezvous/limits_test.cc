// Bounds on what a client may ask of the server (rendezvous/policy/limits.h), and
// membership that is authenticated, not claimed (session credentials).
#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "rendezvous/policy/limits.h"
#include "rendezvous/policy/memory_budget.h"
#include "rendezvous/run/run.h"
#include "rendezvous/run/run_registry.h"
#include "rendezvous/store/kv_store.h"

using namespace meshrun::rendezvous;
using Catch::Contains;

namespace {

NodeDesc Node(const std::string& id, int nproc = 1) {
  NodeDesc d;
  d.master_port = 29500;
  d.node_id = id;
  d.hostname = id;
  d.addr = "10.0.0.1";
  d.nproc = nproc;
  return d;
}

RunConfig Config(int min, int max) {
  RunConfig c;
  c.min_nodes = min;
  c.max_nodes = max;
  return c;
}

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

struct Sink : EventSink {
  std::vector<RunEvent> events;
  void Push(const RunEvent& e) override { events.push_back(e); }
  void CloseStale(const std::string&) override {}
  void CloseRun(const std::string&) override {}
};

}  // namespace

TEST_CASE("server limits are set by name and refuse bad values", "[limits]") {
  ServerLimits l;
  REQUIRE(SetLimit("max_runs", "7", &l).ok());
  CHECK(l.max_runs == 7);
  REQUIRE(SetLimit("min_keep_alive_interval", "0.25", &l).ok());
  CHECK(l.min_keep_alive_interval == absl::Milliseconds(250));
  CHECK_THAT(Msg(SetLimit("max_runs", "-1", &l)), Contains("max_runs=-1") && Contains("> 0"));
  CHECK_THAT(Msg(SetLimit("max_wait", "nan", &l)), Contains("max_wait=nan"));
  absl::Status unknown = SetLimit("max_bogus", "1", &l);
  CHECK(absl::IsNotFound(unknown));
  CHECK_THAT(Msg(unknown), Contains("max_value_bytes"));
}

TEST_CASE("a join's fields are checked: integers, ports, lengths", "[limits]") {
  ServerLimits l;
  CHECK(CheckJoin("job", Node("a"), Config(1, 2), l).ok());
  NodeDesc huge = Node("a", INT32_MAX);
  CHECK_THAT(Msg(CheckJoin("job", huge, Config(1, 2), l)), Contains("nproc=2147483647") && Contains("max_nproc"));
  for (int port : {-1, 0, 70000}) {
    NodeDesc n = Node("a");
    n.master_port = port;
    CHECK_THAT(Msg(CheckJoin("job", n, Config(1, 1), l)), Contains("master_port=") && Contains("1..65535"));
  }
  RunConfig c = Config(1, 1);
  c.max_restarts = -1;
  CHECK_THAT(Msg(CheckJoin("job", Node("a"), c, l)), Contains("max_restarts=-1"));
  c = Config(1, 1);
  c.keep_alive_interval = absl::Milliseconds(1);
  CHECK_THAT(Msg(CheckJoin("job", Node("a"), c, l)), Contains("keep_alive_interval=1ms") &&
                                                          Contains("min_keep_alive_interval"));
  // INT64_MAX ms on the wire: such a run would never declare a silent member lost.
  c.keep_alive_interval = absl::Milliseconds(INT64_MAX);
  CHECK_THAT(Msg(CheckJoin("job", Node("a"), c, l)), Contains("keep_alive_interval=2562047788015h") &&
                                                          Contains("1h (max_keep_alive_interval)"));
  c.keep_alive_interval = absl::Minutes(61);
  CHECK_THAT(Msg(CheckJoin("job", Node("a"), c, l)), Contains("max_keep_alive_interval"));
  c.keep_alive_interval = absl::Hours(1);
  CHECK(CheckJoin("job", Node("a"), c, l).ok());
  CHECK_THAT(Msg(CheckJoin(std::string(1 << 20, 'x'), Node("a"), Config(1, 1), l)),
             Contains("run id of 1048576 bytes") && Contains("max_run_id_bytes=256"));
  // The message shows only the start of a long value.
  CHECK(Msg(CheckJoin(std::string(1 << 20, 'x'), Node("a"), Config(1, 1), l)).size() < 400);
  CHECK_THAT(Msg(CheckJoin("job", Node("a"), Config(3, 2), l)), Contains("nnodes=3:2"));
}

TEST_CASE("a run's store is bounded in keys, bytes and value size, and Add does not wrap", "[limits]") {
  DeadlineTimer timer;
  ServerLimits l;
  l.max_keys_per_run = 3;
  l.max_store_bytes_per_run = 80;
  l.max_value_bytes = 40;
  auto kv = std::make_shared<KvStore>("run", &timer, l);
  REQUIRE(kv->Set(0, "a", "1").ok());
  CHECK_THAT(Msg(kv->Set(0, "b", std::string(41, 'v'))), Contains("max_value_bytes=40"));
  REQUIRE(kv->Set(0, "b", std::string(40, 'v')).ok());
  absl::Status full = kv->Set(0, "c", std::string(40, 'v'));
  CHECK(absl::IsResourceExhausted(full));
  CHECK_THAT(Msg(full), Contains("max_store_bytes_per_run=80"));
  REQUIRE(kv->Set(0, "c", "3").ok());
  CHECK_THAT(Msg(kv->Set(0, "d", "4")), Contains("max_keys_per_run=3"));
  // All or nothing.
  CHECK_FALSE(kv->MultiSet(0, {"a", "e"}, {"x", "y"}).ok());
  CHECK(kv->size() == 3);
  REQUIRE(kv->Set(0, "n", "9223372036854775807").code() == absl::StatusCode::kResourceExhausted);
  auto kv2 = std::make_shared<KvStore>("run2", &timer);
  REQUIRE(kv2->Set(0, "n", "9223372036854775807").ok());
  absl::StatusOr<int64_t> wrapped = kv2->Add(0, "n", 1);
  CHECK(absl::IsInvalidArgument(wrapped.status()));
  CHECK_THAT(Msg(wrapped.status()), Contains("overflows"));
  // Freed bytes can be used again.
  CHECK(*kv->Delete(0, "b"));
  CHECK(kv->Set(0, "d", std::string(40, 'w')).ok());
}

TEST_CASE("every store of a server shares one byte budget", "[limits]") {
  DeadlineTimer timer;
  ServerLimits l;
  l.max_store_bytes = 100;
  auto total = std::make_shared<std::atomic<int64_t>>(0);
  auto a = std::make_shared<KvStore>("a", &timer, l, total);
  auto b = std::make_shared<KvStore>("b", &timer, l, total);
  REQUIRE(a->Set(0, "k", std::string(60, 'v')).ok());
  CHECK_THAT(Msg(b->Set(0, "k", std::string(60, 'v'))), Contains("max_store_bytes=100"));
  a.reset();  // A removed run returns its bytes.
  CHECK(b->Set(0, "k", std::string(60, 'v')).ok());
}

TEST_CASE("waits and waiters are bounded", "[limits]") {
  DeadlineTimer timer;
  ServerLimits l;
  l.max_waiters_per_run = 1;
  l.max_wait = absl::Seconds(5);
  auto kv = std::make_shared<KvStore>("run", &timer, l);
  absl::Status first, second, long_wait;
  kv->Await(0, {"k"}, absl::Seconds(1), [&](absl::StatusOr<std::vector<std::string>> v) { first = v.status(); });
  kv->Await(0, {"k"}, absl::Seconds(1), [&](absl::StatusOr<std::vector<std::string>> v) { second = v.status(); });
  kv->Await(0, {"j"}, absl::Seconds(6), [&](absl::StatusOr<std::vector<std::string>> v) { long_wait = v.status(); });
  CHECK_THAT(Msg(second), Contains("max_waiters_per_run=1"));
  CHECK_THAT(Msg(long_wait), Contains("max_wait"));
  REQUIRE(kv->Set(0, "k", "v").ok());
  CHECK(first.ok());
}

TEST_CASE("the server holds at most max_runs runs, ended ones make room", "[limits]") {
  DeadlineTimer timer;
  ServerLimits l;
  l.max_runs = 2;
  RunRegistry registry(&timer, l);
  auto r1 = registry.ForJoin("one", -1);
  REQUIRE(r1.ok());
  REQUIRE(registry.ForJoin("two", -1).ok());
  absl::StatusOr<std::shared_ptr<Run>> third = registry.ForJoin("three", -1);
  CHECK(absl::IsResourceExhausted(third.status()));
  CHECK_THAT(Msg(third.status()), Contains("max_runs=2"));
  // Finish run "one": then "three" takes its place.
  std::optional<Assignment> a;
  (*r1)->Join(Node("a"), Config(1, 1), -1, "", [&](absl::StatusOr<Assignment> r) { a = *r; });
  REQUIRE(a.has_value());
  (*r1)->ReportFinished("a", 0, a->session, absl::Seconds(1), [](absl::StatusOr<BarrierResult>) {});
  REQUIRE((*r1)->terminal());
  CHECK(registry.ForJoin("three", -1).ok());
  CHECK(registry.Find("one") == nullptr);
}

TEST_CASE("a round whose world size is too large is refused on every node", "[limits]") {
  DeadlineTimer timer;
  ServerLimits l;
  l.max_world_size = 10;
  auto run = std::make_shared<Run>("job", &timer, l);
  absl::Status s1, s2;
  run->Join(Node("a", 6), Config(2, 2), -1, "", [&](absl::StatusOr<Assignment> r) { s1 = r.status(); });
  run->Join(Node("b", 6), Config(2, 2), -1, "", [&](absl::StatusOr<Assignment> r) { s2 = r.status(); });
  CHECK_THAT(Msg(s1), Contains("world size 12") && Contains("max_world_size"));
  CHECK(Msg(s1) == Msg(s2));
}

TEST_CASE("forged reports from invented or foreign nodes are refused and change nothing", "[limits][auth]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  std::map<std::string, Assignment> got;
  RunConfig c = Config(2, 2);
  c.max_restarts = 3;
  for (const char* id : {"a", "b"}) {
    run->Join(Node(id), c, -1, "", [&, id](absl::StatusOr<Assignment> r) { got[id] = *r; });
  }
  REQUIRE(got.size() == 2);
  CHECK(got["a"].session.size() == 32);
  CHECK(got["a"].session != got["b"].session);
  // ReportFinished from two invented node ids does not finish the run.
  for (const char* id : {"x", "y"}) {
    absl::Status s;
    run->ReportFinished(id, 0, "", absl::Seconds(1), [&](absl::StatusOr<BarrierResult> r) { s = r.status(); });
    CHECK(absl::IsPermissionDenied(s));
  }
  CHECK_FALSE(run->terminal());
  // ReportFailure from 'intruder', or from 'a' without its credential.
  WorkerFailure f;
  f.node_id = "intruder";
  f.round = 0;
  CHECK(absl::IsPermissionDenied(run->ReportFailure(f, "").status()));
  f.node_id = "a";
  CHECK(absl::IsPermissionDenied(run->ReportFailure(f, got["b"].session).status()));
  CHECK(run->Status().restart_count == 0);
  CHECK(run->Status().round == 0);
  // Heartbeat and Watch need the credential too.
  CHECK(absl::IsPermissionDenied(run->Heartbeat("a", "").status()));
  CHECK(absl::IsPermissionDenied(run->Heartbeat("a", got["b"].session).status()));
  CHECK(run->Heartbeat("a", got["a"].session).ok());
  auto thief = std::make_shared<Sink>();
  CHECK(absl::IsPermissionDenied(run->Watch("a", thief, 0, "")));
  auto owner = std::make_shared<Sink>();
  CHECK(run->Watch("a", owner, 0, got["a"].session).ok());
  // A join speaking for a known node without its credential changes nothing.
  absl::Status hijack;
  run->Join(Node("a"), c, 0, "", [&](absl::StatusOr<Assignment> r) { hijack = r.status(); });
  CHECK(absl::IsPermissionDenied(hijack));
  // The real members still can.
  CHECK(run->ReportFailure(f, got["a"].session).ok());
  CHECK(run->Status().restart_count == 1);
}

TEST_CASE("a new node's stream starts with its credential, a second stream for it needs it", "[limits][auth]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  auto sink = std::make_shared<Sink>();
  REQUIRE(run->Watch("n1", sink, -1, "").ok());
  REQUIRE_FALSE(sink->events.empty());
  CHECK(sink->events[0].kind == RunEvent::Kind::kSession);
  const std::string cred = sink->events[0].session;
  CHECK(cred.size() == 32);
  auto other = std::make_shared<Sink>();
  CHECK(absl::IsPermissionDenied(run->Watch("n1", other, -1, "")));
  CHECK(absl::IsPermissionDenied(run->Watch("n2", other, -1, "not-a-credential")));
  absl::Status joined = absl::UnknownError("");
  run->Join(Node("n1"), Config(1, 1), -1, cred, [&](absl::StatusOr<Assignment> r) { joined = r.status(); });
  CHECK(joined.ok());
}

TEST_CASE("members' streams are bounded per run, non-members' make room by evicting the oldest", "[limits]") {
  DeadlineTimer timer;
  ServerLimits l;
  l.max_watchers_per_run = 1;
  l.max_nonmember_watchers_per_run = 2;
  auto run = std::make_shared<Run>("job", &timer, l);
  struct Evictable : Sink {
    std::string evicted;
    void CloseEvicted(const std::string& why) override { evicted = why; }
  };
  auto a = std::make_shared<Evictable>(), b = std::make_shared<Evictable>(), c = std::make_shared<Evictable>();
  REQUIRE(run->Watch("a", a, -1, "").ok());
  REQUIRE(run->Watch("b", b, -1, "").ok());
  // A third non-member: the oldest (a) is ended and forgotten.
  REQUIRE(run->Watch("c", c, -1, "").ok());
  CHECK_THAT(a->evicted, Contains("max_nonmember_watchers_per_run=2") && Contains("'a'"));
  CHECK(b->evicted.empty());
  CHECK(run->watcher_counts() == std::make_pair<int64_t, int64_t>(0, 2));
  CHECK(absl::IsPermissionDenied(run->Watch("a", std::make_shared<Sink>(), -1, a->events.at(0).session)));
  // A node that joins (over the stream's connection, no credential needed)
  // has a member's stream, which nobody evicts; members are bounded by
  // max_watchers_per_run.
  run->Join(Node("j1"), Config(1, 2), -1, "", [](absl::StatusOr<Assignment>) {}, "conn-1");
  auto j1 = std::make_shared<Evictable>();
  REQUIRE(run->Watch("j1", j1, -1, "", nullptr, "conn-1").ok());
  REQUIRE(j1->events.size() >= 1);
  CHECK(j1->events.at(0).kind == RunEvent::Kind::kSession);  // The join's credential, handed to its stream.
  CHECK(run->watcher_counts() == std::make_pair<int64_t, int64_t>(1, 2));
  for (int i = 0; i < 5; ++i) REQUIRE(run->Watch(absl::StrCat("x", i), std::make_shared<Evictable>(), -1, "").ok());
  CHECK(j1->evicted.empty());
  CHECK(run->watcher_counts() == std::make_pair<int64_t, int64_t>(1, 2));
  // Another connection gets no credential for j1.
  CHECK(absl::IsPermissionDenied(run->Watch("j1", std::make_shared<Sink>(), -1, "", nullptr, "conn-2")));
  run->Join(Node("j2"), Config(1, 2), -1, "", [](absl::StatusOr<Assignment>) {}, "conn-3");
  absl::Status s = run->Watch("j2", std::make_shared<Sink>(), -1, "", nullptr, "conn-3");
  CHECK(absl::IsResourceExhausted(s));
  CHECK_THAT(Msg(s), Contains("max_watchers_per_run=1"));
}

TEST_CASE("the memory budget holds one node charge per node a run knows, streams evicted or not", "[limits]") {
  DeadlineTimer timer;
  ServerLimits l;
  l.max_nonmember_watchers_per_run = 1;
  MemoryBudget budget(/*limit=*/int64_t{1} << 30, /*member_reserve=*/0);
  {
    auto run = std::make_shared<Run>("job", &timer, l, nullptr, &budget);
    REQUIRE(run->Watch("a", std::make_shared<Sink>(), -1, "").ok());
    CHECK(budget.held(HeldKind::kNode) == kNodeCost);
    // b's stream evicts a's, and a (never joined) is forgotten: one node known, one charged.
    for (const char* id : {"b", "c", "d"}) {
      REQUIRE(run->Watch(id, std::make_shared<Sink>(), -1, "").ok());
      CHECK(budget.held(HeldKind::kNode) == kNodeCost);
    }
    CHECK(run->watcher_counts() == std::make_pair<int64_t, int64_t>(0, 1));
  }
  CHECK(budget.held(HeldKind::kNode) == 0);
}

TEST_CASE("a join that reaches the server after its node's stream takes the stream's credential", "[limits]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  auto sink = std::make_shared<Sink>();
  REQUIRE(run->Watch("n", sink, -1, "", nullptr, "conn-1").ok());
  REQUIRE(sink->events.at(0).kind == RunEvent::Kind::kSession);
  std::optional<absl::StatusOr<Assignment>> from_other, joined;
  // From another connection, no credential: refused.
  run->Join(Node("n"), Config(1, 1), -1, "", [&](absl::StatusOr<Assignment> a) { from_other = a; }, "conn-2");
  REQUIRE(from_other.has_value());
  CHECK(absl::IsPermissionDenied(from_other->status()));
  run->Join(Node("n"), Config(1, 1), -1, "", [&](absl::StatusOr<Assignment> a) { joined = a; }, "conn-1");
  REQUIRE(joined.has_value());
  CHECK(joined->ok());
}

TEST_CASE("a stream opened before its node's join is a member's before the join's ROUND_CLOSED reaches it",
          "[limits]") {
  // The last join closes the round: its ROUND_CLOSED is pushed to every
  // stream, this node's too, which must already count as a member's (a
  // non-member's event needs room in the memory budget; found by the flood
  // test, where the job's last node lost its stream to a full budget).
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  struct MemberSink : Sink {
    bool member = false;
    std::vector<std::pair<RunEvent::Kind, bool>> pushed;  // Each event, and whether a member's then.
    void Push(const RunEvent& e) override {
      Sink::Push(e);
      pushed.emplace_back(e.kind, member);
    }
    void PromoteToMember() override { member = true; }
  };
  run->Join(Node("first"), Config(2, 2), -1, "", [](absl::StatusOr<Assignment>) {}, "conn-1");
  auto last = std::make_shared<MemberSink>();
  REQUIRE(run->Watch("last", last, -1, "", nullptr, "conn-2").ok());
  CHECK_FALSE(last->member);  // Not joined yet: a non-member's stream.
  std::optional<absl::StatusOr<Assignment>> joined;
  run->Join(Node("last"), Config(2, 2), -1, "", [&](absl::StatusOr<Assignment> a) { joined = a; }, "conn-2");
  REQUIRE(joined.has_value());
  REQUIRE(joined->ok());
  bool saw_closed = false;
  for (const auto& [kind, member] : last->pushed) {
    if (kind != RunEvent::Kind::kRoundClosed) continue;
    saw_closed = true;
    CHECK(member);
  }
  CHECK(saw_closed);
}
