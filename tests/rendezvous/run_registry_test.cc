// The registry of a long-lived server: ended runs are removed after
// ended_run_ttl (an injected clock jumps ahead), the run that ended first
// makes room at max_runs, and one run's status costs that run only.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <optional>
#include <set>
#include <vector>

#include "rendezvous/run/run.h"
#include "rendezvous/run/run_registry.h"
#include "rendezvous/policy/timer.h"

using namespace meshrun::rendezvous;

namespace {

NodeDesc Node(const std::string& id) {
  NodeDesc d;
  d.master_port = 29500;
  d.node_id = id;
  d.hostname = id;
  d.addr = "10.0.0.1";
  d.nproc = 1;
  return d;
}

RunConfig Config(int restarts = 0) {
  RunConfig c;
  c.min_nodes = 1;
  c.max_nodes = 1;
  c.max_restarts = restarts;
  return c;
}

struct Sink : EventSink {
  std::string closed;
  void Push(const RunEvent&) override {}
  void CloseStale(const std::string& why) override { closed = why; }
  void CloseRun(const std::string& why) override { closed = why; }
};

// Joins one node (a run of one node closes its round at once) and returns
// its assignment.
Assignment JoinOne(Run& run, const std::string& node) {
  std::optional<absl::StatusOr<Assignment>> got;
  run.Join(Node(node), Config(), -1, "", [&](absl::StatusOr<Assignment> a) { got = std::move(a); });
  REQUIRE(got.has_value());
  REQUIRE(got->ok());
  return **got;
}

void Finish(Run& run, const std::string& node, const Assignment& a) {
  std::optional<absl::StatusOr<BarrierResult>> r;
  run.ReportFinished(node, a.round, a.session, absl::Seconds(5), [&](absl::StatusOr<BarrierResult> b) { r = b; });
  REQUIRE(r.has_value());
  REQUIRE(r->ok());
  REQUIRE((*r)->all_finished);
}

void Fail(Run& run, const std::string& node, const Assignment& a) {
  WorkerFailure f;
  f.node_id = node;
  f.round = a.round;
  f.exit_code = 3;
  REQUIRE(run.ReportFailure(f, a.session).ok());
  REQUIRE(run.terminal());
}

}  // namespace

TEST_CASE("finished and failed runs are shown until ended_run_ttl, then removed with their store", "[registry]") {
  DeadlineTimer timer;
  std::atomic<int64_t> ahead_s{0};
  ServerLimits limits;  // ended_run_ttl: the default 10 minutes.
  RunRegistry registry(&timer, limits, [&] { return absl::Now() + absl::Seconds(ahead_s.load()); });
  absl::Mutex removed_mu;
  std::set<std::string> removed;  // The periodic sweep's hook runs on the timer's thread.
  registry.SetOnRemoved([&](const std::string& id) {
    absl::MutexLock lock(&removed_mu);
    removed.insert(id);
  });

  auto done = *registry.ForJoin("done", -1);
  auto failed = *registry.ForJoin("failed", -1);
  auto live = *registry.ForJoin("live", -1);
  auto store_only = *registry.FindOrCreate("store-only");
  Assignment a = JoinOne(*done, "n1");
  auto sink = std::make_shared<Sink>();
  REQUIRE(done->Watch("n1", sink, a.round, a.session).ok());
  REQUIRE(done->kv().Set(a.round, "k", std::string(1000, 'x')).ok());
  Finish(*done, "n1", a);
  Fail(*failed, "n2", JoinOne(*failed, "n2"));
  JoinOne(*live, "n3");
  REQUIRE(registry.size() == 4);

  // Nine minutes 59 later: still there, and `status` shows them as ended.
  ahead_s = 599;
  CHECK(registry.SweepEnded() == 0);
  REQUIRE(registry.StatusOf("done").has_value());
  CHECK(registry.StatusOf("done")->state == "finished");
  CHECK(registry.StatusOf("done")->kv_keys == 1);
  CHECK(registry.StatusOf("failed")->state == "failed");

  // Past ten minutes: both ended runs are gone; the live run and the
  // store-only run stay. The removed run's stream learns why.
  ahead_s = 601;
  registry.SweepEnded();  // The periodic sweep may have been first.
  CHECK(registry.Find("done") == nullptr);
  CHECK(registry.Find("failed") == nullptr);
  CHECK_FALSE(registry.StatusOf("done").has_value());
  CHECK(registry.Find("live") == live);
  CHECK(registry.Find("store-only") == store_only);
  CHECK(registry.size() == 2);
  {
    absl::MutexLock lock(&removed_mu);
    CHECK(removed == std::set<std::string>{"done", "failed"});
  }
  CHECK(sink->closed == "run 'done' ended and was removed");
  CHECK(done->kv().size() == 0);
  std::vector<RunStatus> all = registry.Status();
  REQUIRE(all.size() == 2);
  CHECK(all[0].run_id == "live");
  CHECK(all[1].run_id == "store-only");

  // The id is free for a new job.
  auto again = *registry.ForJoin("done", -1);
  CHECK(again != done);
  CHECK(registry.StatusOf("done")->state == "joining");
}

TEST_CASE("the periodic sweep removes an ended run without being asked", "[registry]") {
  DeadlineTimer timer;
  ServerLimits limits;
  SetLimit("ended_run_ttl", "0.2", &limits).IgnoreError();
  REQUIRE(limits.ended_run_ttl == absl::Milliseconds(200));
  RunRegistry registry(&timer, limits);
  auto run = *registry.ForJoin("short", -1);
  Assignment a = JoinOne(*run, "n");
  const absl::Time ended = absl::Now();
  Finish(*run, "n", a);
  for (int i = 0; i < 300 && registry.Find("short") != nullptr; ++i) absl::SleepFor(absl::Milliseconds(10));
  const absl::Duration took = absl::Now() - ended;
  CHECK(registry.Find("short") == nullptr);
  CHECK(took >= absl::Milliseconds(200));
  CHECK(took < absl::Seconds(2));
}

TEST_CASE("at max_runs the run that ended first makes room", "[registry][limits]") {
  DeadlineTimer timer;
  ServerLimits limits;
  limits.max_runs = 3;
  RunRegistry registry(&timer, limits);
  std::vector<std::string> removed;  // The hook runs on this thread here.
  registry.SetOnRemoved([&](const std::string& id) { removed.push_back(id); });
  auto a = *registry.ForJoin("a", -1);
  auto b = *registry.ForJoin("b", -1);
  auto c = *registry.ForJoin("c", -1);
  Assignment ab = JoinOne(*b, "nb");
  Assignment aa = JoinOne(*a, "na");
  Assignment ac = JoinOne(*c, "nc");
  Finish(*b, "nb", ab);  // b ends first, then a.
  Finish(*a, "na", aa);
  REQUIRE(registry.ForJoin("d", -1).ok());
  CHECK(registry.Find("b") == nullptr);
  CHECK(registry.Find("a") == a);
  REQUIRE(registry.FindOrCreate("e").ok());
  CHECK(registry.Find("a") == nullptr);
  // c is live; a store call finds no room, a join removes the store-only e.
  CHECK(absl::IsResourceExhausted(registry.FindOrCreate("f2").status()));
  REQUIRE(registry.ForJoin("f", -1).ok());
  CHECK(registry.Find("e") == nullptr);
  CHECK(absl::IsResourceExhausted(registry.ForJoin("g", -1).status()));
  CHECK(removed == std::vector<std::string>{"b", "a", "e"});
  // A new job under an ended run's id replaces it: removed too.
  Finish(*c, "nc", ac);
  REQUIRE(registry.ForJoin("c", -1).ok());
  CHECK(registry.Find("c") != c);
  CHECK(removed == std::vector<std::string>{"b", "a", "e", "c"});
}

TEST_CASE("at max_runs an ended run whose agents are still connected makes room only after ended_run_room_grace",
          "[registry][limits]") {
  DeadlineTimer timer;
  std::atomic<int64_t> ahead_s{0};
  ServerLimits limits;
  limits.max_runs = 2;
  limits.ended_run_room_grace = absl::Seconds(10);
  RunRegistry registry(&timer, limits, [&] { return absl::Now() + absl::Seconds(ahead_s.load()); });
  auto done = *registry.ForJoin("done", -1);
  auto live = *registry.ForJoin("live", -1);
  Assignment a = JoinOne(*done, "n1");
  JoinOne(*live, "n2");
  auto sink = std::make_shared<Sink>();
  REQUIRE(done->Watch("n1", sink, a.round, a.session).ok());  // Its agent is still there.
  Finish(*done, "n1", a);
  CHECK_FALSE(done->agents_left());
  // Its agent has its barrier's answer but not yet left: no room made, the
  // stream is not told its run was removed.
  CHECK(absl::IsResourceExhausted(registry.ForJoin("new", -1).status()));
  CHECK(registry.Find("done") == done);
  CHECK(sink->closed.empty());
  // The agent leaves: room at once.
  done->Unwatch("n1", sink.get());
  CHECK(done->agents_left());
  REQUIRE(registry.ForJoin("new", -1).ok());
  CHECK(registry.Find("done") == nullptr);
  // An agent that never leaves: room after the grace.
  auto other = registry.Find("new");
  Assignment b = JoinOne(*other, "n3");
  auto sink2 = std::make_shared<Sink>();
  REQUIRE(other->Watch("n3", sink2, b.round, b.session).ok());
  Finish(*other, "n3", b);
  CHECK(absl::IsResourceExhausted(registry.ForJoin("newer", -1).status()));
  ahead_s = 11;
  REQUIRE(registry.ForJoin("newer", -1).ok());
  CHECK(registry.Find("new") == nullptr);
  CHECK(sink2->closed == "run 'new' ended and was removed");
}

TEST_CASE("a run's end that comes after its registry is gone is harmless", "[registry]") {
  DeadlineTimer timer;
  std::shared_ptr<Run> run;
  Assignment a;
  {
    RunRegistry registry(&timer);
    run = *registry.ForJoin("orphan", -1);
    a = JoinOne(*run, "n");
  }
  // Closed with the registry; ending it now reaches no registry.
  std::optional<absl::StatusOr<BarrierResult>> r;
  run->ReportFinished("n", a.round, a.session, absl::Seconds(1), [&](absl::StatusOr<BarrierResult> b) { r = b; });
  CHECK(r.has_value());
}

TEST_CASE("one run's status costs that run: 100,000 runs held", "[registry][scale]") {
  DeadlineTimer timer;
  ServerLimits limits;
  limits.max_runs = 200000;
  RunRegistry registry(&timer, limits);
  constexpr int kRuns = 100000;
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < kRuns; ++i) REQUIRE(registry.FindOrCreate("run-" + std::to_string(i)).ok());
  const absl::Duration fill = absl::Now() - t0;
  auto run = *registry.ForJoin("run-50000", -1);
  JoinOne(*run, "n");

  // Median of 101 one-run queries.
  std::vector<absl::Duration> one;
  for (int i = 0; i < 101; ++i) {
    const absl::Time s = absl::Now();
    std::optional<RunStatus> st = registry.StatusOf("run-50000");
    one.push_back(absl::Now() - s);
    REQUIRE(st.has_value());
    REQUIRE(st->nodes == 1);
  }
  std::sort(one.begin(), one.end());
  // Every run, sorted (what a one-run Status used to build first).
  const absl::Time s = absl::Now();
  const size_t all = registry.Status().size();
  const absl::Duration every = absl::Now() - s;
  CHECK(all == kRuns);
  std::printf("registry of %d runs: filled in %s; StatusOf(one) median %s, max %s; Status(all) %s\n", kRuns,
              absl::FormatDuration(fill).c_str(), absl::FormatDuration(one[50]).c_str(),
              absl::FormatDuration(one.back()).c_str(), absl::FormatDuration(every).c_str());
  CHECK(one[50] < absl::Milliseconds(1));
  CHECK(one[50] * 100 < every);
}

TEST_CASE("CancelAndWait returns after a running callback has returned", "[timer]") {
  DeadlineTimer timer;
  std::atomic<bool> started{false};
  std::atomic<bool> finished{false};
  DeadlineTimer::Id id = timer.Schedule(absl::Now(), [&] {
    started = true;
    absl::SleepFor(absl::Milliseconds(200));
    finished = true;
  });
  for (int i = 0; i < 200 && !started; ++i) absl::SleepFor(absl::Milliseconds(5));
  REQUIRE(started);
  CHECK_FALSE(timer.CancelAndWait(id));
  CHECK(finished);
  // An entry that has not started is removed, and never runs.
  std::atomic<bool> ran{false};
  DeadlineTimer::Id later = timer.Schedule(absl::Now() + absl::Seconds(30), [&] { ran = true; });
  CHECK(timer.CancelAndWait(later));
  CHECK_FALSE(ran);
}

TEST_CASE("a store-only run is removed once idle for store_only_run_ttl unless a read is parked in it or a node "
          "joined it",
          "[registry]") {
  DeadlineTimer timer;
  std::atomic<int64_t> ahead_s{0};
  std::atomic<int> aborted{0};  // Before the registry: its end aborts the parked read.
  std::vector<std::string> removed;
  absl::Mutex removed_mu;
  ServerLimits limits;
  limits.store_only_run_ttl = absl::Seconds(100);
  RunRegistry registry(&timer, limits, [&] { return absl::Now() + absl::Seconds(ahead_s.load()); });
  registry.SetOnRemoved([&](const std::string& id) {
    absl::MutexLock lock(&removed_mu);
    removed.push_back(id);
  });
  auto idle = *registry.FindOrCreate("idle");
  REQUIRE(idle->kv().Set(0, "k", "v").ok());
  auto busy = *registry.FindOrCreate("busy");
  auto waiting = *registry.FindOrCreate("waiting");
  waiting->kv().Await(0, {"never"}, absl::Seconds(1000), [&](absl::StatusOr<std::vector<std::string>> v) {
    if (absl::IsAborted(v.status())) ++aborted;
  });
  auto joined = *registry.FindOrCreate("joined");
  JoinOne(*joined, "n1");  // A node's run, even if its store goes quiet.
  // A refused join admits no node: still store-only, removed when idle.
  auto refused = *registry.FindOrCreate("refused");
  bool refused_answered = false;
  refused->Join(Node("x"), Config(), -1, "not-a-credential",
                [&](absl::StatusOr<Assignment> a) { refused_answered = !a.ok(); });
  CHECK(refused_answered);

  // (The periodic sweep may also run at any point below: what is checked is
  // which runs are left, not which call removed them.)
  ahead_s = 99;
  registry.SweepIdleStoreOnly();
  CHECK(registry.Find("idle") == idle);
  REQUIRE(registry.FindOrCreate("busy").ok());  // A store call at +99 s.
  ahead_s = 101;
  registry.SweepIdleStoreOnly();
  CHECK(registry.Find("idle") == nullptr);
  CHECK(registry.Find("refused") == nullptr);
  CHECK(idle->kv().size() == 0);  // Its store freed.
  CHECK(registry.Find("busy") == busy);
  CHECK(registry.Find("waiting") == waiting);
  CHECK(registry.Find("joined") == joined);
  {
    absl::MutexLock lock(&removed_mu);
    std::sort(removed.begin(), removed.end());
    CHECK(removed == std::vector<std::string>{"idle", "refused"});
  }
  ahead_s = 200;
  registry.SweepIdleStoreOnly();  // busy, 101 s after its call.
  CHECK(registry.Find("busy") == nullptr);
  CHECK(registry.Find("waiting") == waiting);
  CHECK(aborted == 0);
  // The id is free: a store call makes a fresh, empty run.
  auto again = *registry.FindOrCreate("idle");
  CHECK(again != idle);
  CHECK_FALSE(*again->kv().Check(0, {"k"}));
}

// Joins of two-node rounds that are withdrawn before their round closes
// (issue 30: 1,024 cancelled joins locked every new job out at max_runs).
TEST_CASE("a run its nodes left is removed once it had no node and no call for nodeless_run_ttl, freeing max_runs",
          "[registry]") {
  DeadlineTimer timer;
  std::atomic<int64_t> ahead_s{0};
  ServerLimits limits;
  limits.max_runs = 3;
  limits.nodeless_run_ttl = absl::Seconds(100);
  limits.store_only_run_ttl = absl::Hours(1);
  limits.ended_run_ttl = absl::Hours(1);
  std::atomic<int> cancelled{0};  // Before the registry: its end answers the pending join.
  RunRegistry registry(&timer, limits, [&] { return absl::Now() + absl::Seconds(ahead_s.load()); });
  RunConfig two = Config();
  two.min_nodes = two.max_nodes = 2;
  auto join = [&](const std::string& id) {
    auto run = *registry.ForJoin(id, -1);
    run->Join(Node("n1"), two, -1, "",
              [&](absl::StatusOr<Assignment> a) { cancelled += absl::IsCancelled(a.status()) ? 1 : 0; });
    return run;
  };
  // An ended run is ended_run_ttl's, however long its nodes are gone.
  auto ended = *registry.ForJoin("ended", -1);
  Finish(*ended, "e1", JoinOne(*ended, "e1"));
  REQUIRE(ended->terminal());
  ahead_s = 200;
  registry.SweepNodeless();
  CHECK(registry.Find("ended") == ended);
  ahead_s = 3700;
  registry.SweepEnded();
  REQUIRE(registry.Find("ended") == nullptr);
  ahead_s = 0;

  // Idle from the last node's leaving, not from its join: a join that waited
  // 200 s (the registry saw it 200 s ago) and was withdrawn now is kept. A
  // store-only run is store_only_run_ttl's.
  ahead_s = -200;
  auto late = join("late");
  auto store = *registry.FindOrCreate("store");
  ahead_s = 0;
  late->CancelJoin("n1");
  registry.SweepNodeless();
  CHECK(registry.Find("late") == late);
  ahead_s = 101;
  registry.SweepNodeless();
  CHECK(registry.Find("late") == nullptr);
  CHECK(registry.Find("store") == store);
  ahead_s = 3700;
  registry.SweepIdleStoreOnly();
  REQUIRE(registry.Find("store") == nullptr);
  ahead_s = 0;

  auto left = join("left");
  left->CancelJoin("n1");
  auto waiting = join("waiting");  // Its join still pending.
  auto watched = *registry.ForJoin("watched", -1);
  auto sink = std::make_shared<Sink>();
  REQUIRE(watched->Watch("w1", sink, -1, "").ok());  // A stream open.
  CHECK(cancelled == 2);
  // Full: a new job is refused while the runs are held.
  CHECK(absl::IsResourceExhausted(registry.ForJoin("new", -1).status()));

  // (The periodic sweep may run at any point below too: what is checked is
  // which runs are left, not which call removed them.)
  ahead_s = 99;
  registry.SweepNodeless();
  CHECK(registry.Find("left") == left);
  ahead_s = 101;
  registry.SweepNodeless();
  CHECK(registry.Find("left") == nullptr);
  CHECK(registry.Find("waiting") == waiting);
  CHECK(registry.Find("watched") == watched);
  // Its room is free for a new job.
  REQUIRE(registry.ForJoin("new", -1).ok());

  // A stream's end is a node leaving too.
  ahead_s = 0;
  watched->Unwatch("w1", sink.get());
  registry.SweepNodeless();
  CHECK(registry.Find("watched") == watched);
  ahead_s = 101;
  registry.SweepNodeless();
  CHECK(registry.Find("watched") == nullptr);
  CHECK(registry.Find("waiting") == waiting);
}
