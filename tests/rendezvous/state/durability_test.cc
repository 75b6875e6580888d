// Every answer is durable, or it is not an answer (docs/design.md, 4d):
// what a run's agents hear of a durable change (a closed round, a restart,
// a store write) comes only after the journal saved it; a failed save, or
// one whose outcome is unknown, answers UNAVAILABLE, sends no event of it
// and tells the replica (which reloads). Checked from outside the run: the
// answers its callers get and the events its streams receive.
#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "rendezvous/run/run.h"
#include "rendezvous/run/run_registry.h"
#include "rendezvous/state/state.h"
#include "tests/rendezvous/run_test_support.h"

using namespace meshrun::rendezvous;
using namespace meshrun::rendezvous::testing;
using meshrun::rendezvous::state::MemoryJournal;
using meshrun::rendezvous::state::RunRecord;

namespace {

bool Has(const Recorder& r, RunEvent::Kind kind) {
  for (const RunEvent& e : r.events) {
    if (e.kind == kind) return true;
  }
  return false;
}

// Counts the replica's calls (Replica::Reload in the server).
struct LostHook {
  std::atomic<int> calls{0};
  std::string last;
  std::function<void(const absl::Status&)> Fn() {
    return [this](const absl::Status& s) {
      last = std::string(s.message());
      ++calls;
    };
  }
};

// A journal whose next run save blocks until released.
struct BlockingJournal : MemoryJournal {
  absl::Notification entered, release;
  std::atomic<bool> block{false};
  absl::Status Save(const RunRecord& r) override {
    if (block.exchange(false)) {
      entered.Notify();
      release.WaitForNotification();
    }
    return MemoryJournal::Save(r);
  }
};

// A journal that queues saves without waiting (as the etcd journal's group
// commit does) and saves them, in order, when told to.
// Thread-safe (a save nothing waits on is queued from the timer's thread).
struct QueuingJournal : MemoryJournal {
  absl::Mutex mu;
  std::vector<std::pair<RunRecord, SavedCallback>> queued ABSL_GUARDED_BY(mu);
  void SaveAsync(const RunRecord& r, SavedCallback done) override {
    absl::MutexLock lock(&mu);
    queued.emplace_back(r, std::move(done));
  }
  size_t Queued() {
    absl::MutexLock lock(&mu);
    return queued.size();
  }
  // The records queued, oldest first.
  std::vector<RunRecord> Records() {
    absl::MutexLock lock(&mu);
    std::vector<RunRecord> out;
    for (const auto& q : queued) out.push_back(q.first);
    return out;
  }
  // Saves what is queued (or fails it with `why`), answering each.
  void Flush(const absl::Status& why = absl::OkStatus()) {
    std::vector<std::pair<RunRecord, SavedCallback>> now;
    {
      absl::MutexLock lock(&mu);
      now.swap(queued);
    }
    for (auto& [r, done] : now) done(why.ok() ? Save(r) : why);
  }
};

// A replica's registry over a MemoryJournal that tells `hook` when its
// durability is lost, with run "job" made by a join.
struct Journaled {
  DeadlineTimer timer;
  MemoryJournal journal;
  LostHook hook;
  RunRegistry registry{&timer};
  std::shared_ptr<Run> run;
  Journaled() {
    registry.SetJournal(&journal, hook.Fn());
    run = *registry.ForJoin("job", -1);
  }
};

// Opens `id`'s event stream, then joins it with the credential the stream
// handed out (the agent's order).
void JoinWithStream(Run& run, const std::string& id, const std::shared_ptr<Recorder>& sink, const RunConfig& c,
                    std::function<void(absl::StatusOr<Assignment>)> done) {
  REQUIRE(run.Watch(id, sink, -1, "").ok());
  REQUIRE(sink->events.at(0).kind == RunEvent::Kind::kSession);
  run.Join(Node(id, 1, id), c, -1, sink->events[0].session, std::move(done));
}

// Polls `cond` every 10 ms for up to 5 s; true once it held.
bool WaitFor(const std::function<bool()>& cond) {
  for (int i = 0; i < 500; ++i) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return cond();
}

// Two nodes' streams and their joins' answers.
struct TwoNodes {
  std::shared_ptr<Recorder> a = std::make_shared<Recorder>();
  std::shared_ptr<Recorder> b = std::make_shared<Recorder>();
  std::vector<absl::StatusOr<Assignment>> answers;
};

}  // namespace

TEST_CASE("a round whose save fails is never answered: UNAVAILABLE, no ROUND_CLOSED, the replica told", "[durability]") {
  Journaled j;
  MemoryJournal& journal = j.journal;
  LostHook& hook = j.hook;
  std::shared_ptr<Run> run = j.run;
  // Nothing written, or written with its outcome unknown to the server (as
  // etcd's Txn that timed out): neither may be acknowledged.
  const bool applied = GENERATE(false, true);
  INFO("the failed write was applied: " << applied);
  TwoNodes t;
  JoinWithStream(*run, "a", t.a, Config(2, 2), [&](absl::StatusOr<Assignment> r) { t.answers.push_back(r); });
  journal.FailWrites(absl::DeadlineExceededError("etcd: context deadline exceeded"), applied);
  creds.Join(*run, Node("b", 1, "b"), Config(2, 2), -1, [&](absl::StatusOr<Assignment> r) { t.answers.push_back(r); });
  REQUIRE(t.answers.size() == 2);
  for (const auto& a : t.answers) {
    CHECK(absl::IsUnavailable(a.status()));
    CHECK_THAT(std::string(a.status().message()), Catch::Contains("context deadline exceeded"));
    CHECK_THAT(std::string(a.status().message()), Catch::Contains("go on with the next leader"));
  }
  CHECK_FALSE(Has(*t.a, RunEvent::Kind::kRoundClosed));
  CHECK(hook.calls == 1);
  CHECK_THAT(hook.last, Catch::Contains("could not be saved"));
  // The run answers nothing more from the state it could not save.
  CHECK(absl::IsUnavailable(run->kv().Set(0, "k", "v")));
}

TEST_CASE("a restart whose save fails sends no RESTART and answers the failure UNAVAILABLE", "[durability]") {
  Journaled j;
  MemoryJournal& journal = j.journal;
  LostHook& hook = j.hook;
  std::shared_ptr<Run> run = j.run;
  TwoNodes t;
  for (const char* id : {"a", "b"}) {
    creds.Join(*run, Node(id, 1, id), Config(2, 2, /*restarts=*/3), -1,
               [&](absl::StatusOr<Assignment> r) { t.answers.push_back(r); });
  }
  REQUIRE(t.answers.size() == 2);
  REQUIRE(t.answers[0].ok());
  REQUIRE(creds.Watch(*run, "b", t.b, 0).ok());
  t.b->events.clear();
  journal.FailWrites(absl::UnavailableError("etcd: no quorum"), false);
  WorkerFailure f;
  f.node_id = "a";
  f.rank = 0;
  f.exit_code = 1;
  f.round = 0;
  absl::StatusOr<FailureVerdict> v = creds.ReportFailure(*run, f);
  CHECK(absl::IsUnavailable(v.status()));
  CHECK_FALSE(Has(*t.b, RunEvent::Kind::kRestart));
  CHECK(hook.calls == 1);
  // What etcd holds is the round that ran: the next leader restores it.
  absl::StatusOr<std::vector<RunRecord>> saved = journal.Load();
  REQUIRE(saved.ok());
  REQUIRE(saved->size() == 1);
  CHECK((*saved)[0].round == 0);
  CHECK((*saved)[0].restart_count == 0);
}

TEST_CASE("events and answers of a change wait for its save, and the run's lock is free meanwhile", "[durability]") {
  DeadlineTimer timer;
  BlockingJournal journal;
  RunRegistry registry(&timer);
  registry.SetJournal(&journal);
  std::shared_ptr<Run> run = *registry.ForJoin("job", -1);
  auto a = std::make_shared<Recorder>();
  std::atomic<int> answered{0};
  JoinWithStream(*run, "a", a, Config(2, 2), [&](absl::StatusOr<Assignment> r) {
    if (r.ok()) ++answered;
  });
  journal.block = true;
  std::thread closer([&] {
    creds.Join(*run, Node("b", 1, "b"), Config(2, 2), -1, [&](absl::StatusOr<Assignment> r) {
      if (r.ok()) ++answered;
    });
  });
  REQUIRE(journal.entered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // The save is in flight: nobody has heard of the round yet...
  CHECK(answered == 0);
  CHECK_FALSE(Has(*a, RunEvent::Kind::kRoundClosed));
  // ...and the run still answers what needs no save (no etcd I/O under its lock).
  CHECK(run->Status().state == "running");
  journal.release.Notify();
  closer.join();
  CHECK(answered == 2);
  CHECK(Has(*a, RunEvent::Kind::kRoundClosed));
  CHECK(journal.Load()->at(0).state == "running");
}

TEST_CASE("a store write the journal refuses is answered UNAVAILABLE, changes nothing, and tells the replica",
          "[durability]") {
  Journaled j;
  MemoryJournal& journal = j.journal;
  LostHook& hook = j.hook;
  std::shared_ptr<Run> run = j.run;
  REQUIRE(run->kv().Set(0, "before", "1").ok());
  journal.FailWrites(absl::FailedPreconditionError("not the leader"), false);
  absl::Status s = run->kv().Set(0, "k", "v");
  CHECK(absl::IsUnavailable(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("not the leader"));
  CHECK_FALSE(*run->kv().Check(0, {"k"}));
  CHECK(hook.calls == 1);
  // Every later write too, even once etcd answers again: the replica reloads first.
  journal.FailWrites(absl::OkStatus(), false);
  CHECK(absl::IsUnavailable(run->kv().Set(0, "k2", "v")));
  CHECK(hook.calls == 1);
}

TEST_CASE("a store write etcd refuses for its size is refused as is, and the replica goes on serving",
          "[durability]") {
  Journaled j;
  MemoryJournal& journal = j.journal;
  LostHook& hook = j.hook;
  std::shared_ptr<Run> run = j.run;
  // Nothing was written (etcd's request size): no doubt about what it holds.
  journal.FailWrites(absl::ResourceExhaustedError("etcd: request is too large"), false);
  absl::Status s = run->kv().Set(0, "k", "v");
  CHECK(absl::IsResourceExhausted(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("too large"));
  CHECK(hook.calls == 0);
  journal.FailWrites(absl::OkStatus(), false);
  CHECK(run->kv().Set(0, "k", "v").ok());
}

TEST_CASE("a save nothing waits on runs on the save timer: the run's timer keeps its deadlines while etcd is slow",
          "[durability]") {
  DeadlineTimer timer;
  DeadlineTimer saver;
  BlockingJournal journal;
  RunRegistry registry(&timer);
  registry.SetJournal(&journal, nullptr, &saver);
  std::shared_ptr<Run> run = *registry.ForJoin("job", -1);
  for (const char* id : {"a", "b"}) {
    creds.Join(*run, Node(id, 1, id), Config(2, 2), -1, [](absl::StatusOr<Assignment> r) { REQUIRE(r.ok()); });
  }
  // The first exit-barrier arrival is saved soon, on the save timer: it blocks there.
  journal.block = true;
  creds.ReportFinished(*run, "a", 0, absl::Seconds(30), [](absl::StatusOr<BarrierResult>) {});
  REQUIRE(journal.entered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::Notification fired;
  timer.Schedule(absl::Now(), [&] { fired.Notify(); });
  CHECK(fired.WaitForNotificationWithTimeout(absl::Seconds(2)));
  journal.release.Notify();
  CHECK(WaitFor([&] {
    absl::StatusOr<std::vector<RunRecord>> saved = journal.Load();
    int finished = 0;
    for (const auto& m : saved->at(0).members) finished += m.finished ? 1 : 0;
    return finished == 1;
  }));
}

TEST_CASE("a change's save is queued, not waited for: the call returns at once, its answers come once saved",
          "[durability]") {
  DeadlineTimer timer;
  QueuingJournal journal;
  LostHook hook;
  RunRegistry registry(&timer);
  registry.SetJournal(&journal, hook.Fn());
  std::shared_ptr<Run> run = *registry.ForJoin("job", -1);
  TwoNodes t;
  auto record = [&](absl::StatusOr<Assignment> r) { t.answers.push_back(r); };
  JoinWithStream(*run, "a", t.a, Config(2, 2, /*restarts=*/3), record);
  creds.Join(*run, Node("b", 1, "b"), Config(2, 2, /*restarts=*/3), -1, record);
  // The round closed on this thread, which did not wait for the save.
  REQUIRE(journal.Queued() == 1);
  CHECK(t.answers.empty());
  CHECK_FALSE(Has(*t.a, RunEvent::Kind::kRoundClosed));
  CHECK(run->Status().state == "running");
  journal.Flush();
  REQUIRE(t.answers.size() == 2);
  for (const auto& a : t.answers) CHECK(a.ok());
  CHECK(Has(*t.a, RunEvent::Kind::kRoundClosed));

  // A failure's verdict waits for the restart's save; a failed save answers
  // UNAVAILABLE, sends no RESTART and tells the replica.
  std::vector<absl::StatusOr<FailureVerdict>> verdicts;
  WorkerFailure f;
  f.node_id = "b";
  f.round = 0;
  f.exit_code = 1;
  run->ReportFailure(f, *creds.Of(*run, "b"), [&](absl::StatusOr<FailureVerdict> v) { verdicts.push_back(v); });
  REQUIRE(journal.Queued() == 1);
  CHECK(verdicts.empty());
  CHECK_FALSE(Has(*t.a, RunEvent::Kind::kRestart));
  journal.Flush(absl::UnavailableError("etcd: no leader"));
  REQUIRE(verdicts.size() == 1);
  CHECK(absl::IsUnavailable(verdicts[0].status()));
  CHECK_THAT(std::string(verdicts[0].status().message()), Catch::Contains("no leader"));
  CHECK_FALSE(Has(*t.a, RunEvent::Kind::kRestart));
  CHECK(hook.calls == 1);
}

TEST_CASE("one save nothing waits on is in flight at a time: arrivals meanwhile go with the next, once it is answered",
          "[durability]") {
  DeadlineTimer timer;
  QueuingJournal journal;
  RunRegistry registry(&timer);
  registry.SetJournal(&journal, nullptr);
  std::shared_ptr<Run> run = *registry.ForJoin("job", -1);
  for (const char* id : {"a", "b", "c"}) {
    creds.Join(*run, Node(id, 1, id), Config(3, 3), -1, [](absl::StatusOr<Assignment> r) { REQUIRE(r.ok()); });
  }
  REQUIRE(journal.Queued() == 1);  // The round's close.
  journal.Flush();
  // Everything the timer had due by then has run (it runs in deadline order).
  auto timer_passed = [&](absl::Duration d) {
    absl::Notification passed;
    timer.Schedule(absl::Now() + d, [&] { passed.Notify(); });
    return passed.WaitForNotificationWithTimeout(absl::Seconds(10));
  };
  creds.ReportFinished(*run, "a", 0, absl::Seconds(30), [](absl::StatusOr<BarrierResult>) {});
  REQUIRE(WaitFor([&] { return journal.Queued() == 1; }));
  // b arrives while a's save is in etcd's hands: no second save is queued.
  creds.ReportFinished(*run, "b", 0, absl::Seconds(30), [](absl::StatusOr<BarrierResult>) {});
  REQUIRE(timer_passed(absl::Milliseconds(100)));
  CHECK(journal.Queued() == 1);
  // a's save answered: the next starts, and carries b.
  journal.Flush();
  REQUIRE(WaitFor([&] { return journal.Queued() == 1; }));
  int finished = 0;
  const std::vector<RunRecord> records = journal.Records();
  REQUIRE(records.size() == 1);
  for (const auto& m : records[0].members) finished += m.finished ? 1 : 0;
  CHECK(finished == 2);
  journal.Flush();
  REQUIRE(timer_passed(absl::Milliseconds(100)));
  CHECK(journal.Queued() == 0);
}
