// Tests of the Jepsen-style checker: the history and probe parsers, the
// store model through the linearizability search, the serving-interval
// check, and the search's speed on a generated history.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tests/jepsen/history.h"
#include "tests/jepsen/linearizability.h"
#include "tests/jepsen/serving_intervals.h"

namespace meshrun::jepsen {
namespace {

// Joins `lines` (fields separated by single spaces) into file text with tabs.
std::string Text(std::initializer_list<const char*> lines) {
  std::string text;
  for (const char* line : lines) text += absl::StrReplaceAll(line, {{" ", "\t"}}) + "\n";
  return text;
}

// Lines: "process op key arg1 arg2 outcome result invoke_ns complete_ns".
std::vector<Operation> History(std::initializer_list<const char*> lines) {
  absl::StatusOr<std::vector<Operation>> ops = ParseHistory(Text(lines), "test");
  INFO(ops.status().ToString());
  REQUIRE(ops.ok());
  return *ops;
}

// The verdict of a history whose operations all touch one key.
KeyVerdict CheckOneKey(std::initializer_list<const char*> lines, int64_t max_states = 1'000'000) {
  CheckOptions options;
  options.max_states = max_states;
  std::vector<KeyVerdict> verdicts = CheckLinearizability(History(lines), options);
  REQUIRE(verdicts.size() == 1);
  INFO(verdicts[0].explanation);
  return verdicts[0];
}

Verdict VerdictOf(std::initializer_list<const char*> lines) {
  return CheckOneKey(lines).verdict;
}

constexpr Verdict kYes = Verdict::kLinearizable;
constexpr Verdict kNo = Verdict::kNotLinearizable;

TEST_CASE("history parser: fields, '-' as empty, comments and empty lines") {
  std::vector<Operation> ops = History({
      "# process op key arg1 arg2 outcome result invoke complete", "",
      "w0.1 write k v1 - ok - 100 200", "probe-r2 cas k - new ok new 300 400",
      "w0.2 add ctr -3 - info - 500 -"});
  REQUIRE(ops.size() == 3);
  CHECK(ops[0].process == "w0.1");
  CHECK(ops[0].kind == OpKind::kWrite);
  CHECK(ops[0].arg1 == "v1");
  CHECK(ops[0].result.empty());
  CHECK(ops[0].invoke_ns == 100);
  CHECK(ops[0].complete_ns == 200);
  CHECK(ops[1].kind == OpKind::kCas);
  CHECK(ops[1].arg1.empty());
  CHECK(ops[1].arg2 == "new");
  CHECK(ops[2].outcome == Outcome::kInfo);
  CHECK(ops[2].delta == -3);
}

TEST_CASE("history parser: a truncated last line is ignored") {
  absl::StatusOr<std::vector<Operation>> ops =
      ParseHistory(Text({"p write k a - ok - 1 2"}) + "p\tread\tk", "h.tsv");
  REQUIRE(ops.ok());
  CHECK(ops->size() == 1);
  ops = ParseHistory(Text({"p write k a - ok - 1 2"}) + "p\tread\tk\t-\t-\tok\tx\t3", "h.tsv");
  REQUIRE(ops.ok());
  CHECK(ops->size() == 1);
}

TEST_CASE("history parser: a malformed line is rejected with file and line") {
  const char* good = "p write k a - ok - 1 2";
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"p read k", "expected 9"},           {"p put k a - ok - 1 2", "unknown op"},
      {"p read k - - maybe x 1 2", "unknown outcome"}, {"p read k - - ok x 1 z", "complete_ns"},
      {"p read k - - ok x 5 2", "before invoke_ns"},  {"p add k one - ok 1 1 2", "add delta"},
      {"p add k 1 - ok two 1 2", "add result"},       {"- read k - - ok x 1 2", "empty process"},
  };
  for (const auto& [line, what] : bad) {
    INFO(line);
    absl::StatusOr<std::vector<Operation>> ops = ParseHistory(Text({good, line, good}), "h.tsv");
    REQUIRE_FALSE(ops.ok());
    CHECK(ops.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(ops.status().message()), Catch::StartsWith("h.tsv:2: "));
    CHECK_THAT(std::string(ops.status().message()), Catch::Contains(what));
  }
  // A short last line that does end with a newline was written whole: an error.
  CHECK_FALSE(ParseHistory(Text({good, "p read k"}), "h.tsv").ok());
}

TEST_CASE("probe parser: good lines, truncation, errors with file and line") {
  absl::StatusOr<std::vector<Probe>> probes =
      ParseProbes(Text({"# replica send recv serving", "r0 10 20 1", "r1 30 40 0"}) + "r2\t5", "p");
  REQUIRE(probes.ok());
  REQUIRE(probes->size() == 2);
  CHECK(probes->at(0).replica == "r0");
  CHECK(probes->at(0).send_ns == 10);
  CHECK(probes->at(0).recv_ns == 20);
  CHECK(probes->at(0).serving);
  CHECK_FALSE(probes->at(1).serving);
  for (const char* line : {"r0 10 20 2", "r0 20 10 1", "r0 x 10 1", "r0 1 2"}) {
    INFO(line);
    absl::StatusOr<std::vector<Probe>> bad = ParseProbes(Text({"r0 1 2 1", line}), "p.tsv");
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(std::string(bad.status().message()), Catch::StartsWith("p.tsv:2: "));
  }
}

TEST_CASE("linearizable: a sequential history of writes, reads and cas") {
  CHECK(VerdictOf({"p read k - - ok - 0 1", "p write k a - ok - 10 20", "p read k - - ok a 30 40",
                   "p cas k a b ok b 50 60", "p read k - - ok b 70 80"}) == kYes);
}

TEST_CASE("linearizable: a read concurrent with a write may return either value") {
  for (const char* read : {"r read k - - ok a 25 35", "r read k - - ok b 25 35"}) {
    INFO(read);
    CHECK(VerdictOf({"w write k a - ok - 0 10", "w write k b - ok - 20 40", read}) == kYes);
  }
  // Both reads inside the write: the first may see the new value, the second too.
  CHECK(VerdictOf({"w write k a - ok - 0 10", "w write k b - ok - 20 90",
                   "r read k - - ok b 25 35", "r read k - - ok b 40 50"}) == kYes);
  // Reads that touch the write's completion at the same instant count as concurrent.
  CHECK(VerdictOf({"w write k a - ok - 0 10", "r read k - - ok - 10 20"}) == kYes);
}

TEST_CASE("linearizable: cas follows c10d compare_set, absent key included") {
  // Absent key, expected empty: sets desired, returns desired.
  CHECK(VerdictOf({"p cas k - x ok x 0 1", "p read k - - ok x 2 3"}) == kYes);
  // Absent key, expected non-empty: nothing changes, returns expected.
  CHECK(VerdictOf({"p cas k y z ok y 0 1", "p read k - - ok - 2 3",
                   "p cas k - x ok x 4 5"}) == kYes);
  // Present key, mismatch: nothing changes, returns the current value.
  CHECK(VerdictOf({"p write k a - ok - 0 1", "p cas k q z ok a 2 3",
                   "p read k - - ok a 4 5"}) == kYes);
  // Two racing cas from the same value: exactly one wins.
  CHECK(VerdictOf({"p write k a - ok - 0 1", "p cas k a b ok b 10 20", "q cas k a c ok b 10 20",
                   "p read k - - ok b 30 40"}) == kYes);
}

TEST_CASE("not linearizable: cas results that compare_set cannot give") {
  // Said it swapped, but the value was a, not b.
  CHECK(VerdictOf({"p write k a - ok - 0 1", "p cas k b c ok c 2 3"}) == kNo);
  // Absent key with expected non-empty cannot swap.
  CHECK(VerdictOf({"p cas k y z ok z 0 1"}) == kNo);
  // Absent key with expected empty always swaps.
  CHECK(VerdictOf({"p cas k - x ok - 0 1"}) == kNo);
  // Both racing cas cannot win.
  CHECK(VerdictOf({"p write k a - ok - 0 1", "p cas k a b ok b 10 20",
                   "q cas k a c ok c 10 20"}) == kNo);
}

TEST_CASE("linearizable: adds count from 0 and reads see the decimal sum") {
  CHECK(VerdictOf({"p add k 1 - ok 1 0 1", "p add k 2 - ok 3 2 3", "p read k - - ok 3 4 5",
                   "p add k -5 - ok -2 6 7", "p read k - - ok -2 8 9"}) == kYes);
  // Concurrent adds may apply in either order.
  CHECK(VerdictOf({"p add k 1 - ok 3 0 10", "q add k 2 - ok 2 0 10"}) == kYes);
}

TEST_CASE("not linearizable: a stale read after a completed write") {
  KeyVerdict verdict = CheckOneKey({"w write k a - ok - 0 10", "w write k b - ok - 20 30",
                                    "r read k - - ok a 40 50"});
  CHECK(verdict.verdict == kNo);
  CHECK_THAT(verdict.explanation, Catch::Contains("read() = \"a\""));
  CHECK_THAT(verdict.explanation, Catch::Contains("state after it: \"b\""));
  std::vector<std::string> lines = absl::StrSplit(verdict.explanation, '\n');
  CHECK(lines.size() <= 20);
}

TEST_CASE("not linearizable: a lost acknowledged write") {
  CHECK(VerdictOf({"w write k a - ok - 0 10", "w write k b - ok - 20 30", "r read k - - ok a 40 50",
                   "r read k - - ok a 60 70", "r read k - - ok a 80 90"}) == kNo);
}

TEST_CASE("not linearizable: a double-applied add") {
  CHECK(VerdictOf({"p add k 1 - ok 1 0 10", "q add k 1 - ok 3 20 30"}) == kNo);
}

TEST_CASE("an info add may apply once, never twice") {
  CHECK(VerdictOf({"p add k 1 - ok 1 0 10", "q add k 1 - info - 20 -",
                   "r read k - - ok 2 40 50", "r read k - - ok 2 60 70"}) == kYes);
  // Or late: the reads see it only from some point on.
  CHECK(VerdictOf({"p add k 1 - ok 1 0 10", "q add k 1 - info - 20 -",
                   "r read k - - ok 1 40 50", "r read k - - ok 2 60 70"}) == kYes);
  CHECK(VerdictOf({"p add k 1 - ok 1 0 10", "q add k 1 - info - 20 -",
                   "r read k - - ok 2 40 50", "r read k - - ok 3 60 70"}) == kNo);
  // Once applied it cannot be undone.
  CHECK(VerdictOf({"p add k 1 - ok 1 0 10", "q add k 1 - info - 20 -",
                   "r read k - - ok 2 40 50", "r read k - - ok 1 60 70"}) == kNo);
}

TEST_CASE("not linearizable: a read of a value never written") {
  CHECK(VerdictOf({"w write k a - ok - 0 10", "r read k - - ok zzz 20 30"}) == kNo);
  // A failed write never happened.
  CHECK(VerdictOf({"w write k a - fail - 0 10", "r read k - - ok a 20 30"}) == kNo);
  CHECK(VerdictOf({"w write k a - fail - 0 10", "r read k - - ok - 20 30"}) == kYes);
}

TEST_CASE("an info write may show up later, never before its invoke") {
  CHECK(VerdictOf({"w write k a - ok - 0 10", "w write k b - info - 20 30",
                   "r read k - - ok a 40 50", "r read k - - ok b 1000 1010"}) == kYes);
  // Or never.
  CHECK(VerdictOf({"w write k a - ok - 0 10", "w write k b - info - 20 30",
                   "r read k - - ok a 1000 1010"}) == kYes);
  CHECK(VerdictOf({"w write k a - ok - 0 10", "r read k - - ok b 20 30",
                   "w write k b - info - 40 50"}) == kNo);
  // An info read is dropped, whatever it claims.
  CHECK(VerdictOf({"w write k a - ok - 0 10", "r read k - - info zzz 20 30"}) == kYes);
}

TEST_CASE("keys are checked independently, and a small state budget is undecided") {
  std::vector<KeyVerdict> verdicts = CheckLinearizability(
      History({"w write a 1 - ok - 0 10", "w write b 2 - ok - 0 10", "r read b - - ok 3 20 30",
               "r read a - - ok 1 20 30"}),
      CheckOptions{});
  REQUIRE(verdicts.size() == 2);
  CHECK(verdicts[0].key == "a");
  CHECK(verdicts[0].verdict == kYes);
  CHECK(verdicts[1].verdict == kNo);
  KeyVerdict undecided = CheckOneKey({"w write k a - ok - 0 10", "w write k b - ok - 0 10",
                                      "r read k - - ok a 20 30"},
                                     /*max_states=*/1);
  CHECK(undecided.verdict == Verdict::kUndecided);
  CHECK_THAT(undecided.explanation, Catch::Contains("state limit"));
}

TEST_CASE("identical info adds are interchangeable, and each applies at most once") {
  CHECK(VerdictOf({"p add k 1 - info - 0 -", "q add k 1 - info - 1 -", "r add k 1 - info - 2 -",
                   "s read k - - ok 1 10 20", "s read k - - ok 3 30 40"}) == kYes);
  CHECK(VerdictOf({"p add k 1 - info - 0 -", "q add k 1 - info - 1 -", "r add k 1 - info - 2 -",
                   "s read k - - ok 4 10 20"}) == kNo);
  // The later-invoked twin cannot stand in for the earlier one before its invoke.
  CHECK(VerdictOf({"p add k 1 - info - 0 -", "q add k 1 - info - 50 -",
                   "s read k - - ok 2 10 20"}) == kNo);
}

TEST_CASE("an info cas may apply later or never, never before its invoke") {
  CHECK(VerdictOf({"w write k a - ok - 0 10", "w cas k a z info - 20 30", "r read k - - ok a 40 50",
                   "r read k - - ok z 60 70"}) == kYes);
  CHECK(VerdictOf({"w write k a - ok - 0 10", "w cas k a z info - 20 30",
                   "r read k - - ok a 60 70"}) == kYes);
  CHECK(VerdictOf({"w write k a - ok - 0 10", "r read k - - ok z 12 18",
                   "w cas k a z info - 20 30"}) == kNo);
  // It cannot swap from a value the key did not hold.
  CHECK(VerdictOf({"w write k b - ok - 0 10", "w cas k a z info - 20 30",
                   "r read k - - ok z 60 70"}) == kNo);
}

// Probe lines: "replica send_ns recv_ns serving".
ServingReport Serving(std::initializer_list<const char*> lines) {
  absl::StatusOr<std::vector<Probe>> probes = ParseProbes(Text(lines), "test");
  REQUIRE(probes.ok());
  return CheckServingIntervals(*probes);
}

TEST_CASE("serving: disjoint streaks are fine") {
  ServingReport report = Serving({"r0 0 1 1", "r0 50 51 1", "r0 100 101 1", "r0 110 111 0",
                                  "r1 120 121 1", "r1 200 201 1", "r0 130 131 0"});
  CHECK(report.replicas == 2);
  CHECK(report.probes == 7);
  CHECK(report.streaks.size() == 2);
  CHECK(report.overlaps.empty());
}

TEST_CASE("serving: overlapping streaks are detected") {
  ServingReport report = Serving({"r0 0 1 1", "r0 50 51 1", "r0 100 101 1", "r1 60 61 1",
                                  "r1 150 151 1"});
  REQUIRE(report.overlaps.size() == 1);
  const ServingOverlap& overlap = report.overlaps[0];
  CHECK(overlap.kind == OverlapKind::kStreaks);
  CHECK(overlap.begin_ns == 61);
  CHECK(overlap.end_ns == 100);
  CHECK_THAT(FormatOverlap(overlap, 0), Catch::Contains("r0 and r1 both served over"));
}

TEST_CASE("serving: a single probe inside another replica's streak is detected") {
  ServingReport report = Serving({"r0 0 1 1", "r0 100 101 1", "r1 40 45 1", "r1 50 51 0"});
  REQUIRE(report.overlaps.size() == 1);
  CHECK(report.overlaps[0].kind == OverlapKind::kProbeInStreak);
  CHECK(report.overlaps[0].probe.replica == "r1");
  CHECK(report.overlaps[0].begin_ns == 40);
  CHECK(report.overlaps[0].end_ns == 45);
}

TEST_CASE("serving: overlapping windows whose proven intervals do not overlap are fine") {
  // r0 proves [10, 20], r1 proves [35, 50]; r0's last window meets r1's first;
  // r2's probe straddles r0's interval end.
  CHECK(Serving({"r0 0 10 1", "r0 20 30 1", "r0 31 32 0", "r1 25 35 1", "r1 50 60 1",
                 "r1 61 62 0", "r2 15 25 1"})
            .overlaps.empty());
  // A serving=0 probe breaks r0's streak, so r0 proves only instants.
  CHECK(Serving({"r0 0 1 1", "r0 50 51 0", "r0 100 101 1", "r1 40 41 1", "r1 60 61 1"})
            .overlaps.empty());
  CHECK_FALSE(Serving({"r0 0 1 1", "r0 100 101 1", "r1 40 41 1", "r1 60 61 1"})
                  .overlaps.empty());
}


// The shape of a generated history.
struct Workload {
  int total_ops = 20'000;
  int keys = 8;
  int counters = 2;   // The last keys: read and add; the others: read, write, cas.
  int processes = 6;
  double info_rate = 0.005;  // Of the updates.
  int max_delta = 3;         // Adds add 1..max_delta.
};

// A history of a real store: the processes run random operations, one at a
// time each, with random latencies; each takes effect at a random instant
// within its call and returns what the store gave then. Every written value
// is unique. Some updates end indeterminate: half of those never take
// effect, the others take effect possibly after the client gave up.
std::vector<Operation> GenerateHistory(uint32_t seed, const Workload& w) {
  std::mt19937_64 rng(seed);
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto chance = [&rng](double p) { return std::bernoulli_distribution(p)(rng); };
  std::vector<Operation> ops(w.total_ops);
  std::vector<std::pair<int64_t, int>> effects;  // (effect time, op), applied ops only.
  std::vector<int64_t> clock(w.processes, 0);
  for (int i = 0; i < w.total_ops; ++i) {
    Operation& op = ops[i];
    const int process = i % w.processes;
    const int64_t key = uniform(0, w.keys - 1);
    const int64_t dice = uniform(0, 99);
    op.process = absl::StrCat("w", process);
    op.key = absl::StrCat("k", key);
    op.kind = dice < 50 ? OpKind::kRead
              : key >= w.keys - w.counters ? OpKind::kAdd
              : dice < 80 ? OpKind::kWrite : OpKind::kCas;
    if (op.kind == OpKind::kWrite) op.arg1 = absl::StrCat("v", i);
    if (op.kind == OpKind::kAdd) op.delta = uniform(1, w.max_delta);
    if (op.kind == OpKind::kAdd) op.arg1 = absl::StrCat(op.delta);
    const int64_t latency = uniform(20'000, 2'000'000);
    op.invoke_ns = clock[process] + uniform(0, 200'000);
    op.complete_ns = clock[process] = op.invoke_ns + latency;
    int64_t effect = uniform(op.invoke_ns, op.complete_ns);
    if (op.kind != OpKind::kRead && chance(w.info_rate)) {
      op.outcome = Outcome::kInfo;
      if (chance(0.5)) continue;  // Never takes effect.
      effect = op.invoke_ns + uniform(0, 3 * latency);
    }
    effects.emplace_back(effect, i);
  }
  std::sort(effects.begin(), effects.end());
  absl::flat_hash_map<std::string, std::string> store;
  for (const auto& [time, i] : effects) {
    Operation& op = ops[i];
    auto current = store.find(op.key);
    const bool present = current != store.end();
    if (op.kind == OpKind::kRead) {
      op.result = present ? current->second : "";
    } else if (op.kind == OpKind::kWrite) {
      store[op.key] = op.arg1;
    } else if (op.kind == OpKind::kAdd) {
      const int64_t sum = (present ? std::stoll(current->second) : 0) + op.delta;
      op.result = store[op.key] = absl::StrCat(sum);
    } else {
      op.arg2 = absl::StrCat("c", i);
      op.arg1 = chance(0.4) ? absl::StrCat("v", uniform(0, i)) : present ? current->second : "";
      const bool swaps = present ? current->second == op.arg1 : op.arg1.empty();
      op.result = swaps ? op.arg2 : present ? current->second : op.arg1;
      if (swaps) store[op.key] = op.arg2;
    }
    if (op.outcome == Outcome::kInfo) op.result.clear();
  }
  return ops;
}

// Makes an ok read of a register return the value of an ok write W although
// another ok write W2 of that key ran entirely after W completed and before
// the read began: a stale read no linearization allows, values being unique.
bool MakeStaleRead(std::vector<Operation>& ops) {
  auto ok_write_of = [](const Operation& op, const Operation& read) {
    return op.kind == OpKind::kWrite && op.outcome == Outcome::kOk && op.key == read.key;
  };
  for (size_t r = ops.size() / 2; r < ops.size(); ++r) {
    Operation& read = ops[r];
    if (read.kind != OpKind::kRead || read.outcome != Outcome::kOk) continue;
    const Operation* latest = nullptr;  // W2: the latest-starting write done before the read.
    for (const Operation& op : ops) {
      if (ok_write_of(op, read) && op.complete_ns < read.invoke_ns &&
          (latest == nullptr || op.invoke_ns > latest->invoke_ns)) {
        latest = &op;
      }
    }
    if (latest == nullptr) continue;
    for (const Operation& op : ops) {
      if (ok_write_of(op, read) && op.complete_ns < latest->invoke_ns && op.arg1 != read.result) {
        read.result = op.arg1;
        return true;
      }
    }
  }
  return false;
}

int InfoOps(const std::vector<Operation>& history) {
  int n = 0;
  for (const Operation& op : history) n += op.outcome == Outcome::kInfo;
  return n;
}

// Checks `history`; `*seconds` is how long it took.
std::vector<KeyVerdict> TimedCheck(const std::vector<Operation>& history, double* seconds) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<KeyVerdict> verdicts = CheckLinearizability(history, CheckOptions{});
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return verdicts;
}

// Every key linearizable; returns the states searched in all.
int64_t RequireAllLinearizable(const std::vector<KeyVerdict>& verdicts) {
  int64_t states = 0;
  for (const KeyVerdict& verdict : verdicts) {
    INFO(verdict.key << ": " << verdict.explanation);
    CHECK(verdict.verdict == Verdict::kLinearizable);
    states += verdict.states;
  }
  return states;
}

TEST_CASE("performance: 20,000 ops on 8 keys by 6 processes, then one stale read") {
  std::vector<Operation> history = GenerateHistory(/*seed=*/42, Workload{});
  const int info_ops = InfoOps(history);
  CHECK(info_ops >= 20);
  double seconds = 0;
  std::vector<KeyVerdict> verdicts = TimedCheck(history, &seconds);
  const int64_t states = RequireAllLinearizable(verdicts);
  std::printf("jepsen checker: 20,000 ops (%d info), 8 keys: linearizable in %.3f s, %lld states\n",
              info_ops, seconds, static_cast<long long>(states));
  CHECK(verdicts.size() == 8);
  CHECK(seconds < 10.0);

  REQUIRE(MakeStaleRead(history));
  double stale_seconds = 0;
  verdicts = TimedCheck(history, &stale_seconds);
  int violations = 0;
  for (const KeyVerdict& verdict : verdicts) {
    violations += verdict.verdict == Verdict::kNotLinearizable;
    CHECK(verdict.verdict != Verdict::kUndecided);
  }
  std::printf("jepsen checker: the same with one stale read: %d key not linearizable in %.3f s\n",
              violations, stale_seconds);
  CHECK(violations == 1);
  CHECK(stale_seconds < 10.0);
}

TEST_CASE("performance: 2 counters with 200 indeterminate adds of 1 among 20,000 ops") {
  Workload workload;
  workload.keys = workload.counters = 2;
  workload.info_rate = 0.02;
  workload.max_delta = 1;
  std::vector<Operation> history = GenerateHistory(/*seed=*/7, workload);
  const int info_ops = InfoOps(history);
  CHECK(info_ops >= 150);
  double seconds = 0;
  const int64_t states = RequireAllLinearizable(TimedCheck(history, &seconds));
  std::printf("jepsen checker: 20,000 ops (%d info) on 2 counters: linearizable in %.3f s, %lld states\n",
              info_ops, seconds, static_cast<long long>(states));
  CHECK(seconds < 10.0);
}

}  // namespace
}  // namespace meshrun::jepsen
