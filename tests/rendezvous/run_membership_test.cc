// The run's members: lost and silent nodes, re-forms, the heartbeat grace
// for the round before's credential, and one event stream per node.
#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <optional>
#include <utility>

#include "common/stale.h"
#include "proto/wire.h"
#include "rendezvous/run/run.h"
#include "tests/rendezvous/run_test_support.h"

using namespace meshrun::rendezvous;
using namespace meshrun::rendezvous::testing;

namespace {

// Watches "a" (its first credential comes in the SESSION event) and joins it
// to a one-node round; returns {credential before the close, after}.
std::pair<std::string, std::string> JoinWithWatch(Run& run, const RunConfig& c, std::optional<Assignment>& got) {
  auto sink = std::make_shared<Recorder>();
  REQUIRE(run.Watch("a", sink, -1, "").ok());
  REQUIRE(!sink->events.empty());
  REQUIRE(sink->events[0].kind == RunEvent::Kind::kSession);
  const std::string before = sink->events[0].session;
  run.Join(Node("a", 1, "a"), c, -1, before, [&](absl::StatusOr<Assignment> r) { got = *r; });
  REQUIRE(got.has_value());
  REQUIRE(got->session != before);
  return {before, got->session};
}

}  // namespace

TEST_CASE("a lost agent makes the survivors re-form without using the budget", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  for (const char* id : {"a", "b"}) {
    creds.Join(*run, Node(id, 1, id), Config(1, 2), -1, [](absl::StatusOr<Assignment>) {});
  }
  auto sink_a = std::make_shared<Recorder>();
  auto sink_b = std::make_shared<Recorder>();
  REQUIRE(creds.Watch(*run, "a", sink_a, 0).ok());
  REQUIRE(creds.Watch(*run, "b", sink_b, 0).ok());
  run->Unwatch("b", sink_b.get());
  REQUIRE(sink_a->events.size() == 2);
  CHECK(sink_a->events[0].kind == RunEvent::Kind::kNodeLost);
  CHECK(sink_a->events[1].kind == RunEvent::Kind::kRestart);
  CHECK(sink_a->events[1].membership_change);
  CHECK(sink_a->events[1].restart_count == 0);
  CHECK(sink_a->events[1].round == 1);
  // The survivor re-forms alone (MIN is 1) at once.
  std::optional<Assignment> got;
  creds.Join(*run, Node("a", 1, "a"), Config(1, 2), 0, [&](absl::StatusOr<Assignment> r) { got = *r; });
  REQUIRE(got.has_value());
  CHECK(got->world_size == 1);
  CHECK(got->restart_count == 0);
  // The lost node is stale from now on, and marked so (common/stale.h): the
  // agent goes by the mark, which the wire carries as the status's details.
  const absl::Status stale = creds.Heartbeat(*run, "b").status();
  CHECK(absl::IsFailedPrecondition(stale));
  CHECK(meshrun::IsStaleStatus(stale));
  const grpc::Status on_wire = wire::ToGrpc(stale);
  CHECK(on_wire.error_details() == std::string(meshrun::kStaleDetail));
  const absl::Status back = wire::FromGrpc(on_wire, "heartbeat");
  CHECK(meshrun::IsStaleStatus(back));
  CHECK_FALSE(meshrun::IsStaleStatus(wire::FromGrpc(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "stale words only"), "x")));
  absl::Status refused;
  creds.Join(*run, Node("b", 1, "b"), Config(1, 2), 0, [&](absl::StatusOr<Assignment> r) { refused = r.status(); });
  CHECK(absl::IsFailedPrecondition(refused));
}

TEST_CASE("a silent node is lost after keep-alive interval x attempts", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  const RunConfig c = WithKeepAlive(Config(1, 2), absl::Milliseconds(50), 2);
  for (const char* id : {"a", "b"}) creds.Join(*run, Node(id, 1, id), c, -1, [](absl::StatusOr<Assignment>) {});
  auto sink_a = std::make_shared<Recorder>();
  REQUIRE(creds.Watch(*run, "a", sink_a, 0).ok());
  // Only "a" keeps beating.
  for (int i = 0; i < 40 && sink_a->events.empty(); ++i) {
    (void)creds.Heartbeat(*run, "a");
    absl::SleepFor(absl::Milliseconds(20));
  }
  REQUIRE_FALSE(sink_a->events.empty());
  CHECK(sink_a->events[0].kind == RunEvent::Kind::kNodeLost);
  CHECK(sink_a->events[0].node_id == "b");
}

TEST_CASE("a node joining below MAX makes the running job re-form with it", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  // Wait for a's answer, not only the run's state: the answer (with the
  // credential the Watch below needs) is delivered after the state changes.
  std::atomic<bool> a_joined{false};
  creds.Join(*run, Node("a", 2, "a"), Config(1, 2), -1, [&](absl::StatusOr<Assignment> r) { a_joined = r.ok(); });
  for (int i = 0; i < 300 && !a_joined; ++i) absl::SleepFor(absl::Milliseconds(10));
  REQUIRE(a_joined);
  REQUIRE(run->Status().state == "running");
  auto sink_a = std::make_shared<Recorder>();
  REQUIRE(creds.Watch(*run, "a", sink_a, 0).ok());
  std::optional<Assignment> b;
  creds.Join(*run, Node("b", 2, "b"), Config(1, 2), -1, [&](absl::StatusOr<Assignment> r) { b = *r; });
  REQUIRE(sink_a->events.size() >= 2);
  CHECK(sink_a->events[1].kind == RunEvent::Kind::kRestart);
  CHECK(sink_a->events[1].membership_change);
  creds.Join(*run, Node("a", 2, "a"), Config(1, 2), 0, [](absl::StatusOr<Assignment>) {});
  REQUIRE(b.has_value());
  CHECK(b->world_size == 4);
  CHECK(b->round == 1);
}

TEST_CASE("a member that re-joined a re-forming round and vanishes is named, and not waited for", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  RunConfig c = Config(1, 3);
  c.last_call_timeout = absl::Seconds(30);  // Only the re-form target may close the round.
  std::map<std::string, Assignment> got;
  for (const char* id : {"a", "b", "c"}) {
    creds.Join(*run, Node(id, 1, id), c, -1, [&, id](absl::StatusOr<Assignment> r) {
      if (r.ok()) got[id] = *r;
    });
  }
  REQUIRE(got.size() == 3);
  auto sink_a = std::make_shared<Recorder>();
  auto sink_b = std::make_shared<Recorder>();
  auto sink_c = std::make_shared<Recorder>();
  REQUIRE(creds.Watch(*run, "a", sink_a, 0).ok());
  REQUIRE(creds.Watch(*run, "b", sink_b, 0).ok());
  REQUIRE(creds.Watch(*run, "c", sink_c, 0).ok());
  run->Unwatch("c", sink_c.get());  // c is lost: a and b re-form (round 1).
  // b re-joins, then vanishes before the round closes. Its connection's
  // calls end in either order: the event stream first, or the join call.
  absl::Status b_join;
  creds.Join(*run, Node("b", 1, "b"), c, 0, [&](absl::StatusOr<Assignment> r) { b_join = r.status(); });
  SECTION("its event stream ends first") { run->Unwatch("b", sink_b.get()); }
  SECTION("its join call is cancelled first") {
    run->CancelJoin("b");
    CHECK(absl::IsCancelled(b_join));
    run->Unwatch("b", sink_b.get());
  }
  CHECK(absl::IsCancelled(b_join));
  bool named = false;
  for (const auto& e : sink_a->events) {
    if (e.kind == RunEvent::Kind::kNodeLost && e.node_id == "b") named = true;
  }
  CHECK(named);
  // a alone closes round 1 at once (b is no longer waited for).
  std::optional<Assignment> a1;
  creds.Join(*run, Node("a", 1, "a"), c, 0, [&](absl::StatusOr<Assignment> r) { a1 = *r; });
  REQUIRE(a1.has_value());
  CHECK(a1->round == 1);
  CHECK(a1->world_size == 1);
}

TEST_CASE("a heartbeat with the round before's credential is accepted until 2 keep-alive intervals, nothing else is",
          "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  RunConfig c = Config(1, 1, 1);
  c.keep_alive_interval = absl::Milliseconds(100);
  c.keep_alive_max_attempt = 100;  // Nobody is lost here.
  std::optional<Assignment> got;
  const absl::Time closed = absl::Now();
  const auto [before, now] = JoinWithWatch(*run, c, got);
  // Sent before the node had its assignment: in flight at the round close.
  CHECK(run->Heartbeat("a", before).ok());
  CHECK(run->Heartbeat("a", now).ok());
  // Only heartbeats: a failure report with the old credential changes nothing.
  WorkerFailure f;
  f.node_id = "a";
  f.round = got->round;
  CHECK(absl::IsPermissionDenied(run->ReportFailure(f, before).status()));
  CHECK(run->Status().restart_count == 0);
  // Refused from 2 intervals after the close on (polled: a loaded machine
  // may run this thread late, never early).
  absl::Time refused_at = absl::InfinitePast();
  while (absl::Now() < closed + absl::Seconds(5)) {
    REQUIRE(run->Heartbeat("a", now).ok());
    const absl::Time t = absl::Now();
    if (absl::IsPermissionDenied(run->Heartbeat("a", before).status())) {
      refused_at = t;
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  REQUIRE(refused_at != absl::InfinitePast());
  CHECK(refused_at - closed >= absl::Milliseconds(150));
  CHECK(absl::IsPermissionDenied(run->Heartbeat("a", before).status()));
  CHECK(absl::IsPermissionDenied(run->Heartbeat("a", std::string(now.size(), '0')).status()));
  CHECK(run->Heartbeat("a", now).ok());
}

TEST_CASE("the round before's credential is refused once the run has ended, within its grace", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  RunConfig c = Config(1, 1);
  c.keep_alive_interval = absl::Seconds(30);  // A grace far longer than this test.
  std::optional<Assignment> got;
  const auto [before, now] = JoinWithWatch(*run, c, got);
  CHECK(run->Heartbeat("a", before).ok());
  absl::StatusOr<BarrierResult> finished;
  run->ReportFinished("a", got->round, now, absl::Seconds(5), [&](absl::StatusOr<BarrierResult> r) { finished = r; });
  REQUIRE(finished.ok());
  REQUIRE(run->terminal());
  CHECK(absl::IsPermissionDenied(run->Heartbeat("a", before).status()));
}

TEST_CASE("a node's newer event stream ends its older one", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  creds.Join(*run, Node("a", 1, "a"), Config(1, 1), -1, [](absl::StatusOr<Assignment> r) { REQUIRE(r.ok()); });
  auto first = std::make_shared<Recorder>();
  auto second = std::make_shared<Recorder>();
  REQUIRE(creds.Watch(*run, "a", first, 0).ok());
  REQUIRE(creds.Watch(*run, "a", second, 0).ok());
  CHECK_THAT(first->closed, Catch::Contains("replaced by a newer event stream of node 'a'"));
  CHECK(second->closed.empty());
  // The older stream's end finds the newer one in place: the node is not lost.
  run->Unwatch("a", first.get());
  CHECK(run->Status().state == "running");
  CHECK(second->closed.empty());
}

TEST_CASE("a node whose join the round refused opens its stream as a new node, not refused for a credential",
          "[run]") {
  // The agent sends its join and opens its event stream at once, on one
  // connection; the join may come first. Here the round closes refusing
  // every joiner (host0's --local_addr is loopback in a 2-host job) before
  // host1's stream arrives: the stream must open (its agent then reports
  // the join's answer, the cause), not be refused for the credential its
  // join made and it never received.
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  NodeDesc h0 = Node("host0:1", 1, "127.0.1.1");
  h0.dialed_addr = "host0";
  h0.local_addr = "host0";
  NodeDesc h1 = Node("host1:1", 1, "192.168.64.11");
  h1.dialed_addr = "192.168.64.10";
  std::vector<absl::Status> answers;
  run->Join(h1, Config(2, 2), -1, "", [&](absl::StatusOr<Assignment> a) { answers.push_back(a.status()); },
            "ipv4:192.168.64.11:5000");
  run->Join(h0, Config(2, 2), -1, "", [&](absl::StatusOr<Assignment> a) { answers.push_back(a.status()); },
            "ipv4:127.0.0.1:5001");
  REQUIRE(answers.size() == 2);
  for (const absl::Status& s : answers) CHECK_THAT(std::string(s.message()), Catch::Contains("loopback"));
  auto sink = std::make_shared<Recorder>();
  absl::Status s = run->Watch("host1:1", sink, -1, "", nullptr, "ipv4:192.168.64.11:5000");
  CHECK(s.ok());
  CHECK_THAT(std::string(s.message()), !Catch::Contains("credential"));
}
