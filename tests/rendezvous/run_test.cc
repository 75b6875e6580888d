// The run's rounds, restart budget and exit barrier, with no network.
#include <catch2/catch.hpp>

#include "common/setting.h"

#include <atomic>
#include <map>

#include "absl/synchronization/mutex.h"
#include "rendezvous/run/run.h"
#include "rendezvous/run/run_registry.h"
#include "tests/rendezvous/run_test_support.h"

using namespace meshrun::rendezvous;
using namespace meshrun::rendezvous::testing;

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
  // The answer comes on the timer's thread (the last call): kept there,
  // checked here (Catch2's assertions are for the test's own thread).
  absl::Mutex mu;
  int done = 0;
  absl::StatusOr<Assignment> answer = absl::UnknownError("no answer");
  creds.Join(*run, Node("a", 1, "1"), Config(1, 2), -1, [&](absl::StatusOr<Assignment> a) {
    absl::MutexLock lock(&mu);
    answer = std::move(a);
    ++done;
  });
  auto answers = [&] {
    absl::MutexLock lock(&mu);
    return done;
  };
  CHECK(answers() == 0);
  for (int i = 0; i < 300 && answers() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  absl::MutexLock lock(&mu);
  CHECK(done == 1);
  REQUIRE(answer.ok());
  CHECK(answer->node_count == 1);
}

TEST_CASE("a conflicting node count or restart limit is refused in the domain's words, marked with the setting",
          "[run]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  creds.Join(*run, Node("a", 1, "1"), Config(2, 2, 3), -1, [](absl::StatusOr<Assignment>) {});
  absl::Status refused;
  creds.Join(*run, Node("b", 1, "2"), Config(2, 4, 3), -1, [&](absl::StatusOr<Assignment> a) { refused = a.status(); });
  CHECK(absl::IsFailedPrecondition(refused));
  CHECK(std::string(refused.message()) ==
        "the node count conflicts in run 'job': this node's join asks for 2 to 4 nodes, the run has 2");
  CHECK(meshrun::SettingOf(refused) == std::string(meshrun::kNodeCount));
  creds.Join(*run, Node("c", 1, "3"), Config(2, 2, 1), -1, [&](absl::StatusOr<Assignment> a) { refused = a.status(); });
  CHECK(std::string(refused.message()) ==
        "the restart limit conflicts in run 'job': this node's join allows 1 restarts, the run allows 3");
  CHECK(meshrun::SettingOf(refused) == std::string(meshrun::kMaxRestarts));
  // No launcher's flag in the domain's words.
  CHECK(std::string(refused.message()).find("--") == std::string::npos);
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
