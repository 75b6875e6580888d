// Replica group placement (meshrun --replica_groups): groups fill in order
// (MIN first, then MAX), a place is held for its node until it joins or the
// hold passes, a node that joined counts in its group's run, a full job
// makes standbys, a withdrawn node frees its place, ended groups take no
// node, and the places held are bounded.
#include <catch2/catch.hpp>

#include <atomic>
#include <optional>
#include <string>

#include "rendezvous/policy/timer.h"
#include "rendezvous/run/replica_group_placer.h"
#include "rendezvous/run/run.h"
#include "rendezvous/run/run_registry.h"

using namespace meshrun::rendezvous;

namespace {

NodeDesc Node(const std::string& id) {
  NodeDesc d;
  d.node_id = id;
  d.hostname = id;
  d.addr = "10.0.0.1";
  d.nproc = 1;
  d.master_port = 29500;
  return d;
}

RunConfig Config(int min, int max) {
  RunConfig c;
  c.min_nodes = min;
  c.max_nodes = max;
  c.last_call_timeout = absl::Seconds(30);
  return c;
}

struct Fixture {
  DeadlineTimer timer;
  std::atomic<int64_t> ahead_s{0};
  ServerLimits limits;
  std::optional<RunRegistry> registry;
  std::optional<ReplicaGroupPlacer> placer;
  explicit Fixture(ServerLimits l = ServerLimits()) : limits(l) {
    auto clock = [this] { return absl::Now() + absl::Seconds(ahead_s.load()); };
    registry.emplace(&timer, limits, clock);
    placer.emplace(&*registry, limits, clock);
  }
  int Place(const std::string& node, int groups, int min, int max) {
    absl::StatusOr<int> g = placer->Place("job", node, groups, min, max);
    REQUIRE(g.ok());
    return *g;
  }
  // `node` joins group `g`'s run (a round of MIN..MAX nodes; it stays open
  // while fewer joined).
  std::shared_ptr<Run> Join(int g, const std::string& node, int min, int max) {
    absl::StatusOr<std::shared_ptr<Run>> run = registry->ForJoin(ReplicaGroupPlacer::GroupRunId("job", g), -1);
    REQUIRE(run.ok());
    (*run)->Join(Node(node), Config(min, max), -1, "", [](absl::StatusOr<Assignment>) {});
    return *run;
  }
};

}  // namespace

TEST_CASE("replica groups: the group run ids", "[replica_groups]") {
  CHECK(ReplicaGroupPlacer::GroupRunId("job1", 0) == "job1-group-0");
  CHECK(ReplicaGroupPlacer::GroupRunId("job1", 12) == "job1-group-12");
}

TEST_CASE("replica groups: nodes fill the groups in order, then stand by, and a node asking again keeps its place",
          "[replica_groups]") {
  Fixture f;
  const int expected[] = {0, 0, 1, 1, 2, 2};
  for (int i = 0; i < 6; ++i) CHECK(f.Place("n" + std::to_string(i), 3, 2, 2) == expected[i]);
  CHECK(f.Place("n6", 3, 2, 2) == -1);  // Every group full: a standby.
  CHECK(f.Place("n3", 3, 2, 2) == 1);   // Asked again: the same place.
  CHECK(f.placer->held() == 6);
}

TEST_CASE("replica groups: elastic groups get their MIN first, then up to MAX", "[replica_groups]") {
  Fixture f;
  CHECK(f.Place("a", 2, 1, 2) == 0);
  CHECK(f.Place("b", 2, 1, 2) == 1);
  CHECK(f.Place("c", 2, 1, 2) == 0);
  CHECK(f.Place("d", 2, 1, 2) == 1);
  CHECK(f.Place("e", 2, 1, 2) == -1);
}

TEST_CASE("replica groups: a hold passes, and a node that joined counts in its group's run", "[replica_groups]") {
  Fixture f;
  REQUIRE(f.Place("n0", 2, 2, 2) == 0);
  REQUIRE(f.Place("n1", 2, 2, 2) == 0);
  f.Join(0, "n0", 2, 2);  // n0 joined; n1 has not (yet).
  f.ahead_s = absl::ToInt64Seconds(f.limits.replica_group_place_hold) + 1;
  // n1's hold passed: group 0 has one node (n0, joined) and room for one.
  CHECK(f.Place("late", 2, 2, 2) == 0);
  CHECK(f.Place("n1", 2, 2, 2) == 1);  // Its place was given away: the next one.
  f.Join(0, "late", 2, 2);
  f.ahead_s = 2 * (absl::ToInt64Seconds(f.limits.replica_group_place_hold) + 1);
  CHECK(f.Place("x", 2, 2, 2) == 1);  // Group 0 full by its run's two nodes, whatever the holds.
  CHECK(f.Place("y", 2, 2, 2) == 1);
  CHECK(f.Place("z", 2, 2, 2) == -1);
}

TEST_CASE("replica groups: a node leaving its group's run frees its place for a standby", "[replica_groups]") {
  Fixture f;
  REQUIRE(f.Place("n0", 1, 2, 2) == 0);
  REQUIRE(f.Place("n1", 1, 2, 2) == 0);
  std::shared_ptr<Run> run = f.Join(0, "n0", 2, 2);  // The round waits for n1.
  CHECK(run->OccupancyOf("n0").participants == 1);
  CHECK(f.Place("standby", 1, 2, 2) == -1);  // n0 joined, n1 holds its place.
  run->CancelJoin("n0");                     // n0 withdraws (its agent went).
  CHECK(run->OccupancyOf("n0").participants == 0);
  CHECK(f.Place("standby", 1, 2, 2) == 0);
}

namespace {

// Fails group `g`'s run of one node (max_restarts 0): its worker exits 3.
void FailGroup(Fixture& f, int g, const std::string& node) {
  absl::StatusOr<std::shared_ptr<Run>> run = f.registry->ForJoin(ReplicaGroupPlacer::GroupRunId("job", g), -1);
  REQUIRE(run.ok());
  std::optional<absl::StatusOr<Assignment>> a;
  (*run)->Join(Node(node), Config(1, 1), -1, "", [&](absl::StatusOr<Assignment> got) { a = std::move(got); });
  REQUIRE(a.has_value());
  REQUIRE(a->ok());
  WorkerFailure failure;
  failure.node_id = node;
  failure.round = (*a)->round;
  failure.exit_code = 3;
  failure.message = "a node failed: code 3";  // (No rank: the message is the root cause's text.)
  REQUIRE((*run)->ReportFailure(failure, (*a)->session).ok());
  REQUIRE((*run)->terminal());
}

}  // namespace

TEST_CASE("replica groups: a group whose run ended takes no node, and all ended is an error", "[replica_groups]") {
  Fixture f;
  REQUIRE(f.Place("n0", 2, 1, 1) == 0);
  FailGroup(f, 0, "n0");
  CHECK(f.Place("n1", 2, 1, 1) == 1);  // Group 0 ended: not a place, though it has no node.
  FailGroup(f, 1, "n1");
  absl::StatusOr<int> g = f.placer->Place("job", "n2", 2, 1, 1);
  REQUIRE(absl::IsFailedPrecondition(g.status()));
  CHECK(std::string(g.status().message()) == "every replica group of run 'job' has ended (2 groups)");
}

TEST_CASE("replica groups: the places held are bounded (max_replica_group_places)", "[replica_groups]") {
  ServerLimits limits;
  limits.max_replica_group_places = 2;
  Fixture f(limits);
  REQUIRE(f.Place("a", 4, 1, 1) == 0);
  REQUIRE(f.Place("b", 4, 1, 1) == 1);
  absl::StatusOr<int> c = f.placer->Place("job", "c", 4, 1, 1);
  REQUIRE(absl::IsResourceExhausted(c.status()));
  CHECK(std::string(c.status().message()).find("max_replica_group_places") != std::string::npos);
  f.ahead_s = absl::ToInt64Seconds(limits.replica_group_place_hold) + 1;
  CHECK(f.Place("c", 4, 1, 1) == 0);  // The holds passed (a and b never joined).
}

TEST_CASE("replica groups: a node asking with another shape than the job's is refused, naming both",
          "[replica_groups]") {
  Fixture f;
  REQUIRE(f.Place("a", 2, 1, 1) == 0);
  REQUIRE(f.Place("b", 2, 1, 1) == 1);
  absl::StatusOr<int> smaller = f.placer->Place("job", "evil", 1, 1, 1);
  REQUIRE(absl::IsFailedPrecondition(smaller.status()));
  CHECK(std::string(smaller.status().message()) ==
        "run 'job' has 2 replica group(s) of 1 node(s) (its other nodes' --nnodes and --replica_groups); this node "
        "asks for 1 replica group(s) of 1 node(s)");
  CHECK(absl::IsFailedPrecondition(f.placer->Place("job", "x", 2, 1, 2).status()));
  CHECK(f.Place("b", 2, 1, 1) == 1);  // b keeps its place: the refused calls changed nothing.
  CHECK(f.placer->held() == 2);
  // Once nothing is held, a group past R still tells a smaller R apart.
  f.Join(0, "a", 1, 1);
  f.Join(1, "b", 1, 1);
  f.ahead_s = absl::ToInt64Seconds(f.limits.replica_group_place_hold) + 1;
  absl::StatusOr<int> fewer = f.placer->Place("job", "c", 1, 1, 1);
  REQUIRE(absl::IsFailedPrecondition(fewer.status()));
  CHECK(std::string(fewer.status().message()).find("has a replica group 1") != std::string::npos);
}

TEST_CASE("replica groups: the expiry list stays within twice the places held, however many went early",
          "[replica_groups]") {
  Fixture f;
  constexpr int kNodes = 3000;
  for (int i = 0; i < kNodes; ++i) {
    const std::string node = "n" + std::to_string(i);
    REQUIRE(f.Place(node, 1, kNodes, kNodes) == 0);
    f.Join(0, node, kNodes, kNodes);  // Joined: its hold goes at the next placement.
  }
  CHECK(f.placer->held() <= 1);
  CHECK(f.placer->expiry_entries() <= 2 * f.placer->held() + 1025);
}

TEST_CASE("replica groups: States says how each group stands, and a group seen ended stays so after its run goes",
          "[replica_groups]") {
  using State = ReplicaGroupState::State;
  Fixture f;
  REQUIRE(f.Place("n0", 3, 1, 1) == 0);
  f.Join(0, "n0", 1, 1);  // Group 0 runs; group 1 has a node joining (of 2); group 2 has no run.
  f.Join(1, "n1", 2, 2);
  std::vector<ReplicaGroupState> s = f.placer->States("job", 3);
  REQUIRE(s.size() == 3);
  CHECK(s[0].state == State::kRunning);
  CHECK(s[0].has_nodes);
  CHECK(s[1].state == State::kJoining);
  CHECK(s[1].has_nodes);
  CHECK(s[2].state == State::kNone);
  CHECK_FALSE(s[2].has_nodes);

  FailGroup(f, 2, "n2");
  s = f.placer->States("job", 3);
  CHECK(s[2].state == State::kFailed);
  CHECK(s[2].failure.find("code 3") != std::string::npos);
  // ended_run_ttl later the failed run is removed; the placer still says it failed.
  f.ahead_s = absl::ToInt64Seconds(f.limits.ended_run_ttl) + 1;
  REQUIRE(f.registry->SweepEnded() == 1);
  REQUIRE(f.registry->Find(ReplicaGroupPlacer::GroupRunId("job", 2)) == nullptr);
  s = f.placer->States("job", 3);
  CHECK(s[2].state == State::kFailed);
  CHECK(s[2].failure.find("code 3") != std::string::npos);
  CHECK(s[0].state == State::kRunning);
  // Another job's groups are its own.
  CHECK(f.placer->States("other", 3)[2].state == State::kNone);
}

TEST_CASE("replica groups: the jobs whose ended groups are remembered are bounded (max_replica_group_jobs)",
          "[replica_groups]") {
  using State = ReplicaGroupState::State;
  ServerLimits limits;
  limits.max_replica_group_jobs = 1;
  Fixture f(limits);
  FailGroup(f, 0, "n0");
  REQUIRE(f.placer->States("job", 1)[0].state == State::kFailed);
  f.ahead_s = absl::ToInt64Seconds(f.limits.ended_run_ttl) + 1;
  REQUIRE(f.registry->SweepEnded() == 1);
  CHECK(f.placer->States("job", 1)[0].state == State::kFailed);  // Remembered.
  // A second job with an ended group takes the one place: the first is forgotten.
  absl::StatusOr<std::shared_ptr<Run>> run = f.registry->ForJoin(ReplicaGroupPlacer::GroupRunId("job2", 0), -1);
  REQUIRE(run.ok());
  std::optional<absl::StatusOr<Assignment>> a;
  (*run)->Join(Node("m0"), Config(1, 1), -1, "", [&](absl::StatusOr<Assignment> got) { a = std::move(got); });
  REQUIRE((a.has_value() && a->ok()));
  WorkerFailure failure;
  failure.node_id = "m0";
  failure.round = (*a)->round;
  failure.exit_code = 3;
  REQUIRE((*run)->ReportFailure(failure, (*a)->session).ok());
  CHECK(f.placer->States("job2", 1)[0].state == State::kFailed);
  CHECK(f.placer->States("job", 1)[0].state == State::kNone);
}
