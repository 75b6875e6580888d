// The server's durable state (rendezvous/state/state.h): records, what a run
// saves and when, and a run restored from its record on another "replica"
// (a second registry), with no network.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>

#include "rendezvous/run/run.h"
#include "rendezvous/run/run_registry.h"
#include "rendezvous/state/serving_gate.h"
#include "rendezvous/state/state.h"
#include "tests/rendezvous/run_test_support.h"

using namespace meshrun::rendezvous;
using namespace meshrun::rendezvous::testing;
using meshrun::rendezvous::state::DecodeRunRecord;
using meshrun::rendezvous::state::EncodeRunRecord;
using meshrun::rendezvous::state::MemoryJournal;
using meshrun::rendezvous::state::RunRecord;

namespace {
// Waits (at most 5 s) until `journal` has had `n` writes.
bool WaitForWrites(const MemoryJournal& journal, int64_t n) {
  for (int i = 0; i < 500 && journal.writes() < n; ++i) absl::SleepFor(absl::Milliseconds(10));
  return journal.writes() >= n;
}
}  // namespace

TEST_CASE("a run record survives JSON and names a bad field", "[state]") {
  RunRecord r;
  r.run_id = "job";
  r.incarnation = 42;
  r.seq = 7;
  r.state = "running";
  r.config = Config(2, 4, 3);
  r.round = 5;
  r.restart_count = 2;
  WorkerFailure f;
  f.node_id = "n1";
  f.message = "exit \xff 1";  // Not UTF-8: kept readable, not thrown on.
  f.permanent = true;
  r.root_cause = f;
  state::MemberRecord m;
  m.node = Node("n1", 8, "10.0.0.1");
  m.assignment.round = 5;
  m.assignment.node_rank = 1;
  m.assignment.session = "secret";
  m.finished = true;
  r.members.push_back(m);
  r.created = absl::FromUnixMillis(1700000000123);
  r.timeline.push_back({absl::FromUnixMillis(1700000001000), "round", "round 0 closed: 1 node(s), world size 8"});
  r.timeline.push_back({absl::FromUnixMillis(1700000002000), "failover", "replica b:1 leads"});
  r.timeline_dropped = 3;
  absl::StatusOr<RunRecord> back = DecodeRunRecord(EncodeRunRecord(r));
  REQUIRE(back.ok());
  CHECK(back->created == r.created);
  REQUIRE(back->timeline.size() == 2);
  CHECK(back->timeline[1].time == absl::FromUnixMillis(1700000002000));
  CHECK(back->timeline[1].kind == "failover");
  CHECK(back->timeline[1].detail == "replica b:1 leads");
  CHECK(back->timeline_dropped == 3);
  CHECK(back->run_id == "job");
  CHECK(back->incarnation == 42);
  CHECK(back->seq == 7);
  CHECK(back->config.max_nodes == 4);
  CHECK(back->config.last_call_timeout == absl::Milliseconds(100));
  CHECK(back->round == 5);
  CHECK(back->restart_count == 2);
  REQUIRE(back->root_cause.has_value());
  CHECK(back->root_cause->permanent);
  REQUIRE(back->members.size() == 1);
  CHECK(back->members[0].node.nproc == 8);
  CHECK(back->members[0].assignment.session == "secret");
  CHECK(back->members[0].finished);

  absl::StatusOr<RunRecord> bad = DecodeRunRecord(R"({"run_id":"x","incarnation":1,"seq":1,"state":"running","round":"two"})");
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()) == "run record: run.round has the wrong type");
  CHECK_FALSE(DecodeRunRecord("not json").ok());
  // A record written before the timeline existed has none.
  absl::StatusOr<RunRecord> old = DecodeRunRecord(
      R"({"run_id":"x","incarnation":1,"seq":1,"state":"running","round":0,"restart_count":0,"members":[],)"
      R"("config":{"min_nodes":1,"max_nodes":1,"last_call_timeout_ms":1,"max_restarts":0,"exit_barrier_timeout_ms":1,)"
      R"("keep_alive_interval_ms":1,"keep_alive_max_attempt":1}})");
  REQUIRE(old.ok());
  CHECK(old->timeline.empty());
  CHECK(old->created == absl::InfinitePast());
}

TEST_CASE("a run saves one record per closed round, not one per join, before the joins are answered", "[state]") {
  DeadlineTimer timer;
  MemoryJournal journal;
  RunRegistry registry(&timer);
  registry.SetJournal(&journal);
  absl::StatusOr<std::shared_ptr<Run>> run = registry.ForJoin("job", -1);
  REQUIRE(run.ok());
  int64_t writes_when_answered = -1;
  for (int i = 0; i < 4; ++i) {
    const std::string id = "n" + std::to_string(i);
    creds.Join(**run, Node(id, 2, "10.0.0." + std::to_string(i)), Config(4, 4), -1, [&](absl::StatusOr<Assignment> a) {
      REQUIRE(a.ok());
      if (writes_when_answered < 0) writes_when_answered = journal.writes();
    });
  }
  CHECK(writes_when_answered == 1);  // Saved before the first answer.
  CHECK(journal.writes() == 1);
  absl::StatusOr<std::vector<RunRecord>> saved = journal.Load();
  REQUIRE(saved.ok());
  REQUIRE(saved->size() == 1);
  CHECK((*saved)[0].state == "running");
  CHECK((*saved)[0].members.size() == 4);
  // An exit-barrier arrival is saved too: soon (on the timer's thread), and
  // once for the arrivals that come meanwhile.
  creds.ReportFinished(**run, "n0", 0, absl::Seconds(30), [](absl::StatusOr<BarrierResult>) {});
  creds.ReportFinished(**run, "n1", 0, absl::Seconds(30), [](absl::StatusOr<BarrierResult>) {});
  CHECK(WaitForWrites(journal, 2));
  absl::SleepFor(absl::Milliseconds(100));  // No second save comes.
  CHECK(journal.writes() == 2);
  saved = journal.Load();
  REQUIRE(saved.ok());
  int finished = 0;
  for (const auto& m : (*saved)[0].members) finished += m.finished ? 1 : 0;
  CHECK(finished == 2);
  // The last arrival is saved before the barrier answers.
  bool answered = false;
  creds.ReportFinished(**run, "n2", 0, absl::Seconds(30), [](absl::StatusOr<BarrierResult>) {});
  creds.ReportFinished(**run, "n3", 0, absl::Seconds(30), [&](absl::StatusOr<BarrierResult> r) {
    answered = r.ok() && r->all_finished;
    CHECK(journal.Load()->at(0).state == "finished");
  });
  CHECK(answered);
}

TEST_CASE("a run restored from its record goes on: members, credentials, restarts, exit barrier", "[state]") {
  DeadlineTimer timer;
  MemoryJournal journal;
  std::map<std::string, Assignment> got;
  {
    // The first "replica": a round closes, a failure spends a restart, the round closes again.
    RunRegistry first(&timer);
    first.SetJournal(&journal);
    std::shared_ptr<Run> run = *first.ForJoin("job", -1);
    for (const char* id : {"a", "b"}) {
      creds.Join(*run, Node(id, 1, id), Config(2, 2, /*restarts=*/2), -1,
                 [&, id](absl::StatusOr<Assignment> a) { got[id] = *a; });
    }
    WorkerFailure f;
    f.node_id = "a";
    f.round = 0;
    f.exit_code = 1;
    REQUIRE(creds.ReportFailure(*run, f).ok());
    for (const char* id : {"a", "b"}) {
      creds.Join(*run, Node(id, 1, id), Config(2, 2, 2), 0, [&, id](absl::StatusOr<Assignment> a) { got[id] = *a; });
    }
    REQUIRE(got["a"].round == 1);
    const int64_t before = journal.writes();
    creds.ReportFinished(*run, "b", 1, absl::Seconds(30), [](absl::StatusOr<BarrierResult>) {});
    REQUIRE(WaitForWrites(journal, before + 1));  // The arrival, saved soon after.
  }
  // The second "replica" takes over with what the journal holds.
  RunRegistry second(&timer);
  MemoryJournal journal2;
  second.SetJournal(&journal2);
  absl::StatusOr<std::vector<RunRecord>> records = journal.Load();
  REQUIRE(records.ok());
  second.Restore(*records, "failover");
  std::shared_ptr<Run> run = second.Find("job");
  REQUIRE(run != nullptr);
  RunStatus s = run->Status();
  CHECK(s.state == "running");
  CHECK(s.round == 1);
  CHECK(s.restart_count == 1);
  CHECK(s.nodes == 2);
  // The nodes' credentials of the first replica hold on the second.
  absl::StatusOr<int64_t> hb = run->Heartbeat("a", got["a"].session);
  REQUIRE(hb.ok());
  CHECK(*hb == 1);
  CHECK(absl::IsPermissionDenied(run->Heartbeat("a", "forged").status()));
  auto sink = std::make_shared<Recorder>();
  CHECK(run->Watch("a", sink, 1, got["a"].session).ok());
  // b reached the exit barrier on the first replica: a's arrival completes it.
  absl::StatusOr<BarrierResult> done = absl::UnknownError("none");
  run->ReportFinished("a", 1, got["a"].session, absl::Seconds(30), [&](absl::StatusOr<BarrierResult> r) { done = r; });
  REQUIRE(done.ok());
  CHECK(done->all_finished);
  CHECK(run->Status().state == "finished");
  // Records go on after the restored seq: the new journal got the end.
  absl::StatusOr<std::vector<RunRecord>> after = journal2.Load();
  REQUIRE(after.ok());
  REQUIRE(after->size() == 1);
  CHECK((*after)[0].state == "finished");
  CHECK((*after)[0].seq > (*records)[0].seq);
}

TEST_CASE("store keys go to the journal before they are applied and come back on the next replica", "[state]") {
  DeadlineTimer timer;
  MemoryJournal journal;
  std::map<std::string, Assignment> got;
  {
    RunRegistry first(&timer);
    first.SetJournal(&journal);
    std::shared_ptr<Run> run = *first.ForJoin("job", -1);
    for (const char* id : {"a", "b"}) {
      creds.Join(*run, Node(id, 1, id), Config(2, 2), -1, [&, id](absl::StatusOr<Assignment> a) { got[id] = *a; });
    }
    REQUIRE(run->kv().Set(0, "mesh/0/0/row0", "nccl-id").ok());
    REQUIRE(run->kv().MultiSet(0, {"x", "y"}, {"1", "2"}).ok());
    REQUIRE(run->kv().Add(0, "count", 5).ok());
    REQUIRE(run->kv().Delete(0, "y").ok());
  }
  RunRegistry second(&timer);
  second.SetJournal(&journal);
  absl::StatusOr<std::vector<RunRecord>> records = journal.Load();
  REQUIRE(records.ok());
  REQUIRE(records->size() == 1);
  CHECK((*records)[0].keys.size() == 3);
  second.Restore(*records, "failover");
  std::shared_ptr<Run> run = second.Find("job");
  REQUIRE(run != nullptr);
  absl::StatusOr<std::vector<std::string>> values = absl::UnknownError("none");
  run->kv().Await(0, {"mesh/0/0/row0", "x", "count"}, absl::ZeroDuration(),
                  [&](absl::StatusOr<std::vector<std::string>> v) { values = std::move(v); });
  REQUIRE(values.ok());
  CHECK(*values == std::vector<std::string>{"nccl-id", "1", "5"});
  CHECK_FALSE(*run->kv().Check(0, {"y"}));
  // A read parked on the new leader completes when the key is set there.
  absl::StatusOr<std::vector<std::string>> parked = absl::UnknownError("none");
  run->kv().Await(0, {"later"}, absl::Seconds(30),
                  [&](absl::StatusOr<std::vector<std::string>> v) { parked = std::move(v); });
  CHECK(absl::IsUnknown(parked.status()));
  REQUIRE(run->kv().Set(0, "later", "here").ok());
  REQUIRE(parked.ok());
  CHECK((*parked)[0] == "here");
}

TEST_CASE("a replica standing by never names itself as the leader", "[state]") {
  meshrun::rendezvous::state::ServingGate gate;
  gate.SetSelf("10.0.0.1:29400");
  gate.SetLeader("10.0.0.2:29400");
  CHECK_THAT(gate.Refusal(), Catch::Contains("stands by; the leader is 10.0.0.2:29400"));
  // Deposed (cut off from etcd), before its watch reads the new leader: the
  // leader it knows is itself, which would send clients back to it.
  gate.SetLeader("10.0.0.1:29400");
  CHECK_THAT(gate.Refusal(), !Catch::Contains("the leader is"));
  CHECK_THAT(gate.Refusal(), Catch::Contains("no replica leads at the moment"));
  gate.SetLeader("");
  CHECK_THAT(gate.Refusal(), Catch::Contains("no replica leads at the moment"));
}

TEST_CASE("an open gate serves no call past its lease's guarantee, until a later one is told", "[state]") {
  using Clock = std::chrono::steady_clock;
  meshrun::rendezvous::state::ServingGate gate;
  gate.SetServing(true);
  CHECK(gate.serving());  // No guarantee told: a single server, no limit.
  gate.SetValidUntil(Clock::now() + std::chrono::seconds(60));
  CHECK(gate.serving());
  // A replica stopped past its lease and resumed: the gate is still open,
  // but the guarantee has run out.
  gate.SetValidUntil(Clock::now() - std::chrono::milliseconds(1));  // Earlier: ignored.
  CHECK(gate.serving());
  meshrun::rendezvous::state::ServingGate resumed;
  resumed.SetServing(true);
  resumed.SetValidUntil(Clock::now() - std::chrono::milliseconds(1));
  CHECK_FALSE(resumed.serving());
  resumed.SetValidUntil(Clock::now() + std::chrono::seconds(60));  // A confirmed renewal.
  CHECK(resumed.serving());
  resumed.SetServing(false);
  CHECK_FALSE(resumed.serving());
}

TEST_CASE("a store-only run's keys come back on the next replica, as a store-only run", "[state]") {
  DeadlineTimer timer;
  MemoryJournal journal;
  {
    RunRegistry first(&timer);
    first.SetJournal(&journal);
    std::shared_ptr<Run> run = *first.FindOrCreate("kv-only");
    REQUIRE(run->kv().Set(0, "addr", "10.0.0.1:1234").ok());
    REQUIRE(run->kv().Add(0, "count", 2).ok());
  }
  absl::StatusOr<std::vector<RunRecord>> records = journal.Load();
  REQUIRE(records.ok());
  REQUIRE(records->size() == 1);
  CHECK((*records)[0].store_only);
  CHECK((*records)[0].run_id == "kv-only");
  CHECK((*records)[0].incarnation > 0);
  RunRegistry second(&timer);
  second.SetJournal(&journal);
  second.Restore(*records, "failover");
  std::shared_ptr<Run> run = second.Find("kv-only");
  REQUIRE(run != nullptr);
  CHECK(run->store_only());
  CHECK(run->incarnation() == (*records)[0].incarnation);
  CHECK(run->Status().state == "joining");
  absl::StatusOr<int64_t> count = run->kv().Add(0, "count", 1);
  REQUIRE(count.ok());
  CHECK(*count == 3);
  absl::StatusOr<std::vector<std::string>> values = absl::UnknownError("none");
  run->kv().Await(0, {"addr"}, absl::ZeroDuration(),
                  [&](absl::StatusOr<std::vector<std::string>> v) { values = std::move(v); });
  REQUIRE(values.ok());
  CHECK((*values)[0] == "10.0.0.1:1234");
}

TEST_CASE("a run removed from the server is removed from the journal, and a new one under its id keeps its own state",
          "[state]") {
  DeadlineTimer timer;
  MemoryJournal journal;
  std::atomic<int64_t> ahead_s{0};
  ServerLimits limits;
  limits.store_only_run_ttl = absl::Seconds(100);
  RunRegistry registry(&timer, limits, [&] { return absl::Now() + absl::Seconds(ahead_s.load()); });
  registry.SetJournal(&journal);

  // An ended job, removed after ended_run_ttl: its record and keys go.
  std::shared_ptr<Run> done = *registry.ForJoin("done", -1);
  Assignment a;
  creds.Join(*done, Node("n1", 1, "n1"), Config(1, 1), -1, [&](absl::StatusOr<Assignment> r) { a = *r; });
  REQUIRE(done->kv().Set(0, "k", "v").ok());
  creds.ReportFinished(*done, "n1", 0, absl::Seconds(30), [](absl::StatusOr<BarrierResult>) {});
  REQUIRE(done->terminal());
  // A store-only run, removed when idle.
  std::shared_ptr<Run> idle = *registry.FindOrCreate("idle");
  REQUIRE(idle->kv().Set(0, "k", "v").ok());
  CHECK(journal.keys() == 2);
  REQUIRE(journal.Load()->size() == 2);

  ahead_s = 601;
  registry.SweepEnded();
  registry.SweepIdleStoreOnly();
  CHECK(registry.size() == 0);
  CHECK(journal.Load()->empty());
  CHECK(journal.keys() == 0);
  // Nothing more reaches the journal from a removed run.
  CHECK_FALSE(idle->kv().Set(0, "late", "v").ok());
  CHECK(journal.keys() == 0);

  // A new job under an ended run's id replaces it: the old one's removal,
  // in whatever order it reaches the journal, leaves the new one's state.
  ahead_s = 0;
  std::shared_ptr<Run> first = *registry.ForJoin("job", -1);
  creds.Join(*first, Node("n1", 1, "n1"), Config(1, 1), -1, [&](absl::StatusOr<Assignment> r) { a = *r; });
  REQUIRE(first->kv().Set(0, "old", "1").ok());
  creds.ReportFinished(*first, "n1", 0, absl::Seconds(30), [](absl::StatusOr<BarrierResult>) {});
  REQUIRE(first->terminal());
  std::shared_ptr<Run> second = *registry.ForJoin("job", -1);
  REQUIRE(second != first);
  CHECK(second->incarnation() > first->incarnation());
  creds.Join(*second, Node("n2", 1, "n2"), Config(1, 1), -1, [&](absl::StatusOr<Assignment> r) { a = *r; });
  REQUIRE(second->kv().Set(0, "new", "2").ok());
  REQUIRE(journal.Drop("job", first->incarnation()).ok());  // Late: after the new run's writes.
  absl::StatusOr<std::vector<RunRecord>> left = journal.Load();
  REQUIRE(left.ok());
  REQUIRE(left->size() == 1);
  CHECK((*left)[0].incarnation == second->incarnation());
  CHECK((*left)[0].state == "running");
  REQUIRE((*left)[0].keys.size() == 1);
  CHECK((*left)[0].keys[0].key == "new");
}

TEST_CASE("keys whose record is gone or of another incarnation are dropped at load", "[state]") {
  MemoryJournal journal;
  // A store-only run's first keys bring its record.
  REQUIRE(journal.SaveKeys("x", 5, 0, {{"k", "old"}}, {}).ok());
  absl::StatusOr<std::vector<RunRecord>> loaded = journal.Load();
  REQUIRE(loaded.ok());
  REQUIRE(loaded->size() == 1);
  CHECK((*loaded)[0].store_only);
  CHECK((*loaded)[0].incarnation == 5);
  // A newer run under the id wrote its record; the old run's removal never
  // happened (its replica stopped leading first).
  RunRecord newer;
  newer.run_id = "x";
  newer.incarnation = 6;
  newer.seq = 1;
  newer.state = "running";
  REQUIRE(journal.Save(newer).ok());
  loaded = journal.Load();
  REQUIRE(loaded.ok());
  REQUIRE(loaded->size() == 1);
  CHECK((*loaded)[0].incarnation == 6);
  CHECK((*loaded)[0].keys.empty());
  CHECK(journal.keys() == 0);
}
