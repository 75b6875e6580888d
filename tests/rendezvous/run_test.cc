// The run's round, restart and barrier logic, with no network.
#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <map>

#include "rendezvous/run.h"
#include "rendezvous/run_registry.h"

using namespace meshrun::rendezvous;

namespace {

struct Recorder : EventSink {
  std::vector<RunEvent> events;
  std::string closed;
  void Push(const RunEvent& e) override { events.push_back(e); }
  void CloseStale(const std::string& why) override { closed = why; }
  void CloseRun(const std::string& why) override { closed = why; }
};

NodeDesc Node(const std::string& id, int nproc, const std::string& addr) {
  NodeDesc d;
  d.node_id = id;
  d.hostname = id;
  d.addr = addr;
  d.nproc = nproc;
  d.master_port = 1000 + nproc;
  return d;
}

RunConfig Config(int min, int max, int restarts = 0) {
  RunConfig c;
  c.min_nodes = min;
  c.max_nodes = max;
  c.max_restarts = restarts;
  c.last_call_timeout = absl::Milliseconds(100);
  return c;
}


// Keeps each node's session credential, per run, as an agent does: the
// first join of a node gives none, later requests give the latest one.
// A run of an earlier test case may have had the same address: an entry
// whose run is gone is started afresh.
struct Creds {
  struct Entry {
    std::weak_ptr<const Run> run;
    std::shared_ptr<std::string> cred;
  };
  std::map<std::pair<const Run*, std::string>, Entry> book;
  std::shared_ptr<std::string> Of(const Run& run, const std::string& id) {
    Entry& e = book[{&run, id}];
    if (!e.cred || e.run.expired()) {
      e.run = run.weak_from_this();
      e.cred = std::make_shared<std::string>();
    }
    return e.cred;
  }
  void Join(Run& run, const NodeDesc& n, const RunConfig& c, int64_t last,
            std::function<void(absl::StatusOr<Assignment>)> done) {
    auto cred = Of(run, n.node_id);
    run.Join(n, c, last, *cred, [cred, done](absl::StatusOr<Assignment> a) {
      if (a.ok()) *cred = a->session;
      done(std::move(a));
    });
  }
  absl::Status Watch(Run& run, const std::string& id, std::shared_ptr<EventSink> sink, int64_t known) {
    return run.Watch(id, std::move(sink), known, *Of(run, id));
  }
  absl::StatusOr<int64_t> Heartbeat(Run& run, const std::string& id) { return run.Heartbeat(id, *Of(run, id)); }
  absl::StatusOr<FailureVerdict> ReportFailure(Run& run, const WorkerFailure& f) {
    return run.ReportFailure(f, *Of(run, f.node_id));
  }
  uint64_t ReportFinished(Run& run, const std::string& id, int64_t round, absl::Duration timeout,
                          Run::BarrierCallback done) {
    return run.ReportFinished(id, round, *Of(run, id), timeout, std::move(done));
  }
};
Creds creds;

}  // namespace

TEST_CASE("a round closes at max nodes with prefix-sum ranks", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  std::map<std::string, Assignment> got;
  auto join = [&](const std::string& id, int nproc, const std::string& addr) {
    creds.Join(*run, Node(id, nproc, addr), Config(3, 3), -1, [&, id](absl::StatusOr<Assignment> a) {
      REQUIRE(a.ok());
      got[id] = *a;
    });
  };
  join("c", 3, "10.0.0.3");
  join("a", 1, "10.0.0.1");
  CHECK(got.empty());
  join("b", 2, "10.0.0.2");
  REQUIRE(got.size() == 3);
  CHECK(got["a"].node_rank == 0);
  CHECK(got["b"].rank_base == 1);
  CHECK(got["c"].rank_base == 3);
  CHECK(got["c"].world_size == 6);
  CHECK(got["b"].master_addr == "10.0.0.1");
  CHECK(got["b"].master_port == got["a"].master_port);
}

TEST_CASE("a round closes after the last call once MIN nodes joined", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  std::atomic<int> done{0};
  creds.Join(*run, Node("a", 1, "1"), Config(1, 2), -1, [&](absl::StatusOr<Assignment> a) {
    REQUIRE(a.ok());
    CHECK(a->node_count == 1);
    ++done;
  });
  CHECK(done == 0);
  for (int i = 0; i < 300 && done == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  CHECK(done == 1);
}

TEST_CASE("conflicting --nnodes is refused naming the field", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  creds.Join(*run, Node("a", 1, "1"), Config(2, 2), -1, [](absl::StatusOr<Assignment>) {});
  absl::Status refused;
  creds.Join(*run, Node("b", 1, "2"), Config(3, 3), -1, [&](absl::StatusOr<Assignment> a) { refused = a.status(); });
  CHECK(absl::IsFailedPrecondition(refused));
  CHECK(std::string(refused.message()).find("--nnodes") != std::string::npos);
}

TEST_CASE("one incident costs one restart: the budget is job-wide", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  auto sink = std::make_shared<Recorder>();
  int closed = 0;
  for (const char* id : {"a", "b"}) {
    creds.Join(*run, Node(id, 2, id), Config(2, 2, /*restarts=*/1), -1, [&](absl::StatusOr<Assignment> a) {
      REQUIRE(a.ok());
      ++closed;
    });
  }
  REQUIRE(closed == 2);
  REQUIRE(creds.Watch(*run, "b", sink, 0).ok());
  WorkerFailure f1;
  f1.node_id = "a";
  f1.rank = 1;
  f1.exit_code = 3;
  f1.round = 0;
  auto v1 = creds.ReportFailure(*run, f1);
  REQUIRE(v1.ok());
  CHECK(v1->decision == Decision::kRestart);
  CHECK(v1->is_root_cause);
  CHECK(v1->next_round == 1);
  WorkerFailure f2 = f1;
  f2.node_id = "b";
  f2.rank = 2;
  auto v2 = creds.ReportFailure(*run, f2);  // Same incident, reported late.
  REQUIRE(v2.ok());
  CHECK_FALSE(v2->is_root_cause);
  CHECK(v2->root_cause.rank == 1);
  REQUIRE(sink->events.size() == 1);
  CHECK(sink->events[0].kind == RunEvent::Kind::kRestart);
  CHECK(sink->events[0].restart_count == 1);

  int restart_count = -1;
  for (const char* id : {"a", "b"}) {
    creds.Join(*run, Node(id, 2, id), Config(2, 2, 1), 0, [&](absl::StatusOr<Assignment> a) {
      REQUIRE(a.ok());
      CHECK(a->round == 1);
      restart_count = a->restart_count;
    });
  }
  CHECK(restart_count == 1);
  WorkerFailure f3 = f1;
  f3.round = 1;
  auto v3 = creds.ReportFailure(*run, f3);
  REQUIRE(v3.ok());
  CHECK(v3->decision == Decision::kStop);
  CHECK(sink->events.back().kind == RunEvent::Kind::kRunFailed);
}

TEST_CASE("a permanent failure fails the run at once with restarts left: none is used", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  auto sink = std::make_shared<Recorder>();
  int closed = 0;
  for (const char* id : {"a", "b"}) {
    creds.Join(*run, Node(id, 2, id), Config(2, 2, /*restarts=*/3), -1, [&](absl::StatusOr<Assignment> a) {
      REQUIRE(a.ok());
      ++closed;
    });
  }
  REQUIRE(closed == 2);
  REQUIRE(creds.Watch(*run, "a", sink, 0).ok());
  WorkerFailure f;
  f.node_id = "b";
  f.rank = 3;
  f.exit_code = 78;
  f.round = 0;
  f.permanent = true;
  auto v = creds.ReportFailure(*run, f);
  REQUIRE(v.ok());
  CHECK(v->decision == Decision::kStop);
  CHECK(v->is_root_cause);
  CHECK(v->root_cause.permanent);
  REQUIRE(sink->events.size() == 1);
  CHECK(sink->events[0].kind == RunEvent::Kind::kRunFailed);
  CHECK(sink->events[0].restart_count == 0);
  CHECK(sink->events[0].root_cause->permanent);
  CHECK(run->Status().restart_count == 0);
  CHECK(run->Status().state == "failed");
}

TEST_CASE("the exit barrier waits for every node, and the id can be reused", "[run]") {
  DeadlineTimer timer;
  RunRegistry registry(&timer);
  auto run = *registry.ForJoin("job", -1);
  for (const char* id : {"a", "b"}) {
    creds.Join(*run, Node(id, 1, id), Config(2, 2), -1, [](absl::StatusOr<Assignment> a) { REQUIRE(a.ok()); });
  }
  std::optional<BarrierResult> first;
  creds.ReportFinished(*run, "a", 0, absl::Seconds(10), [&](absl::StatusOr<BarrierResult> r) { first = *r; });
  CHECK_FALSE(first.has_value());
  std::optional<BarrierResult> second;
  creds.ReportFinished(*run, "b", 0, absl::Seconds(10), [&](absl::StatusOr<BarrierResult> r) { second = *r; });
  REQUIRE(first.has_value());
  CHECK(first->all_finished);
  CHECK(second->all_finished);
  CHECK(run->terminal());
  auto fresh = *registry.ForJoin("job", -1);
  CHECK(fresh != run);
  CHECK(*registry.ForJoin("job", 0) == fresh);
}

TEST_CASE("the exit barrier times out when a node never finishes", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  for (const char* id : {"a", "b"}) {
    creds.Join(*run, Node(id, 1, id), Config(2, 2), -1, [](absl::StatusOr<Assignment>) {});
  }
  std::atomic<bool> done{false};
  BarrierResult result;
  creds.ReportFinished(*run, "a", 0, absl::Milliseconds(50), [&](absl::StatusOr<BarrierResult> r) {
    result = *r;
    done = true;
  });
  for (int i = 0; i < 300 && !done; ++i) absl::SleepFor(absl::Milliseconds(10));
  REQUIRE(done);
  CHECK_FALSE(result.all_finished);
  CHECK(result.finished_nodes == 1);
  CHECK(result.node_count == 2);
}

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
  // The lost node is stale from now on.
  CHECK(absl::IsFailedPrecondition(creds.Heartbeat(*run, "b").status()));
  absl::Status refused;
  creds.Join(*run, Node("b", 1, "b"), Config(1, 2), 0, [&](absl::StatusOr<Assignment> r) { refused = r.status(); });
  CHECK(absl::IsFailedPrecondition(refused));
}

TEST_CASE("a silent node is lost after keep-alive interval x attempts", "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  RunConfig c = Config(1, 2);
  c.keep_alive_interval = absl::Milliseconds(50);
  c.keep_alive_max_attempt = 2;
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
  creds.Join(*run, Node("a", 2, "a"), Config(1, 2), -1, [](absl::StatusOr<Assignment>) {});
  for (int i = 0; i < 300 && run->Status().state != "running"; ++i) absl::SleepFor(absl::Milliseconds(10));
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
  RunConfig c = Config(1, 1);
  c.keep_alive_interval = absl::Milliseconds(30);
  c.keep_alive_max_attempt = 2;
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
