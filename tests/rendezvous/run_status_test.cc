// An ended run's summary: what Status shows once its nodes have left, and
// the answers its late calls get.
#include <catch2/catch.hpp>

#include <optional>

#include "proto/wire.h"
#include "rendezvous/run/run.h"
#include "tests/rendezvous/run_test_support.h"

using namespace meshrun::rendezvous;
using namespace meshrun::rendezvous::testing;

TEST_CASE("an ended run keeps what Status shows once its nodes have left, and only that", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  RunConfig c = Config(2, 2);
  for (const char* id : {"a", "b"}) {
    creds.Join(*run, Node(id, 1 + (id[0] == 'b'), id), c, -1, [](absl::StatusOr<Assignment> r) { REQUIRE(r.ok()); });
  }
  auto sink_a = std::make_shared<Recorder>();
  auto sink_b = std::make_shared<Recorder>();
  REQUIRE(creds.Watch(*run, "a", sink_a, 0).ok());
  REQUIRE(creds.Watch(*run, "b", sink_b, 0).ok());
  std::string state;
  SECTION("finished") {
    for (const char* id : {"a", "b"}) creds.ReportFinished(*run, id, 0, absl::Seconds(10), [](auto) {});
    state = "finished";
  }
  SECTION("failed") {
    run->Unwatch("b", sink_b.get());  // Below MIN with no restart left: the run fails.
    state = "failed";
  }
  REQUIRE(run->terminal());
  const RunStatus before = run->Status();
  CHECK(before.state == state);
  REQUIRE_FALSE(before.node_list.empty());
  // The nodes leave; the last one's stream closing leaves the summary.
  run->Unwatch("a", sink_a.get());
  run->Unwatch("b", sink_b.get());
  const RunStatus after = run->Status();
  CHECK(after.state == before.state);
  CHECK(after.round == before.round);
  CHECK(after.nodes == before.nodes);
  CHECK(after.world_size == before.world_size);
  CHECK(after.lost_nodes == before.lost_nodes);
  REQUIRE(after.node_list.size() == before.node_list.size());
  for (size_t i = 0; i < after.node_list.size(); ++i) {
    const NodeStatus& x = before.node_list[i];
    const NodeStatus& y = after.node_list[i];
    CHECK(y.node_id == x.node_id);
    CHECK(y.hostname == x.hostname);
    CHECK(y.addr == x.addr);
    CHECK(y.node_rank == x.node_rank);
    CHECK(y.nproc == x.nproc);
    CHECK(y.state == x.state);
    CHECK(y.keepalive_age >= x.keepalive_age);  // The same last sign of life, read later.
  }
  // Only the summary is left (an unknown node's heartbeat would be refused
  // by a whole run), and late calls are answered from how the run ended.
  auto ok = run->Heartbeat("nobody", "");
  REQUIRE(ok.ok());
  CHECK(*ok == before.round);
  absl::Status join;
  run->Join(Node("c", 1, "c"), c, 0, "", [&](absl::StatusOr<Assignment> r) { join = r.status(); });
  CHECK(absl::IsFailedPrecondition(join));
  CHECK_THAT(std::string(join.message()), Catch::Contains("has already " + state));
  auto late = std::make_shared<Recorder>();
  REQUIRE(run->Watch("a", late, 0, "a credential the run no longer holds").ok());
  REQUIRE(late->events.size() == 1);
  CHECK(late->events[0].kind == (state == "finished" ? RunEvent::Kind::kRunFinished : RunEvent::Kind::kRunFailed));
  run->Unwatch("a", late.get());
  std::optional<absl::StatusOr<BarrierResult>> fin;
  run->ReportFinished("a", 0, "", absl::Seconds(1), [&](absl::StatusOr<BarrierResult> r) { fin = r; });
  REQUIRE(fin.has_value());
  if (state == "finished") {
    REQUIRE(fin->ok());
    CHECK((*fin)->all_finished);
    CHECK((*fin)->node_count == 2);
  } else {
    CHECK(absl::IsFailedPrecondition(fin->status()));
  }
  WorkerFailure f;
  f.node_id = "a";
  f.round = 0;
  f.exit_code = 3;
  auto verdict = run->ReportFailure(f, "");
  if (state == "finished") {
    CHECK(absl::IsFailedPrecondition(verdict.status()));  // No incident on record.
  } else {
    REQUIRE(verdict.ok());
    CHECK(verdict->decision == Decision::kStop);
    CHECK_FALSE(verdict->is_root_cause);
  }
  // A third Status reads the same summary.
  CHECK(run->Status().node_list.size() == after.node_list.size());
}

TEST_CASE("a run that its liveness check ends with no stream left keeps only its summary", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  const RunConfig c = WithKeepAlive(Config(1, 1), absl::Milliseconds(30), 2);
  creds.Join(*run, Node("a", 1, "a"), c, -1, [](absl::StatusOr<Assignment> r) { REQUIRE(r.ok()); });
  auto sink = std::make_shared<Recorder>();
  REQUIRE(creds.Watch(*run, "a", sink, 0).ok());
  // "a" never beats: lost, the run fails (MIN 1, no restart), its stream is
  // closed as stale and removed.
  for (int i = 0; i < 200 && !run->terminal(); ++i) absl::SleepFor(absl::Milliseconds(10));
  REQUIRE(run->terminal());
  CHECK(run->Status().state == "failed");
  CHECK(run->Status().lost_nodes == 1);
  CHECK(run->Heartbeat("nobody", "").ok());  // The summary only.
  run->Unwatch("a", sink.get());             // Finds nothing: already removed.
  CHECK(run->Status().lost_nodes == 1);
}

TEST_CASE("a run's status crosses the wire whole: store keys, bytes and parked reads", "[status]") {
  RunStatus s;
  s.run_id = "job";
  s.round = 3;
  s.state = "running";
  s.kv_keys = 5;
  s.kv_bytes = 1234;
  s.kv_waiters = 2;
  s.lost_nodes = 1;
  s.node_list.push_back(NodeStatus{"n0", "h0", "10.0.0.1", 0, 8, "running", absl::Seconds(1)});
  meshrun::v1::RunStatus pb;
  meshrun::rendezvous::wire::ToProto(s, &pb);
  const RunStatus back = meshrun::rendezvous::wire::FromProto(pb);
  CHECK(back.run_id == "job");
  CHECK(back.round == 3);
  CHECK(back.kv_keys == 5);
  CHECK(back.kv_bytes == 1234);
  CHECK(back.kv_waiters == 2);
  CHECK(back.lost_nodes == 1);
  REQUIRE(back.node_list.size() == 1);
  CHECK(back.node_list[0].addr == "10.0.0.1");
}
