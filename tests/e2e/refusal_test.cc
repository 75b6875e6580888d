// Agents always stop (issue 30): every refusal the rendezvous server gives an
// agent's join or its event stream ends that agent with one line
// ("meshrun: error: ..." naming the refusal) and a non-zero exit, within 1 s.
// Real `meshrun server` daemons and real agents on loopback; the time is
// measured from outside, from the agent's start (an upper bound on the time
// since the refusal).
#include <catch2/catch.hpp>

#include <signal.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "tests/e2e/e2e_util.h"

using namespace meshrun::testing;

namespace {

// A generous bound for an agent that should end at once: past it, the agent
// is taken for hung (and killed by WaitCommand).
constexpr double kHungAfterS = 15;

// One refusal: the server's flags and environment, the agent's flags and
// environment, and what its one line must say.
struct Refusal {
  std::string name;
  std::vector<std::string> server_flags;
  std::map<std::string, std::string> server_env;
  // An agent of run 'occupant' (--nnodes=2, and occupant_flags) joins
  // before the refused one, when `occupant`.
  bool occupant = false;
  std::vector<std::string> occupant_flags;
  std::string run_id;
  std::vector<std::string> agent_flags;
  std::map<std::string, std::string> agent_env;
  std::vector<std::string> says;
};

// How a refused agent ended: its exit code (-1: hung past kHungAfterS,
// then killed), its standard error, and the time from its start to its end.
struct Ended {
  int code = -2;
  std::string err;
  absl::Duration took;
};

// Starts the refused agent of `r` against the daemon on `port` and waits for its end.
Ended RunRefused(const std::string& dir, const std::string& name, int port, const Refusal& r) {
  std::vector<std::string> args = DaemonClientFlags(port, r.run_id, r.agent_flags);
  args.push_back("/bin/true");
  const absl::Time start = absl::Now();
  NodeProc n = StartNode(dir, name, args, r.agent_env);
  Ended e;
  e.code = WaitCommand(n.pid, kHungAfterS);
  e.took = absl::Now() - start;
  e.err = n.err();
  return e;
}

// Checks one refused agent's end: non-zero, one line naming the refusal, in time.
void CheckRefused(const Ended& e, const Refusal& r) {
  INFO(r.name << ": exit " << e.code << " after " << absl::FormatDuration(e.took) << "; stderr:\n" << e.err);
  CHECK(e.code == 1);  // -1: hung, killed after kHungAfterS.
  CHECK(CountLines(e.err, "") == 1);
  CHECK(e.err.rfind("meshrun: error: ", 0) == 0);
  for (const std::string& s : r.says) CHECK(Contains(e.err, s));
  if (kTimingBounds) CHECK(e.took < absl::Seconds(1));
}

// Runs refusal `r` `times` times against one daemon (the hang was a race:
// a few tries make a regression show).
void RunRefusalCase(const Refusal& r, int times) {
  std::string dir = TempDir();
  Daemon d;
  StartDaemon(d, dir, r.server_env, r.server_flags);
  std::optional<NodeProc> occupant;
  if (r.occupant) {
    std::vector<std::string> args = DaemonClientFlags(d.port, "occupant", r.occupant_flags);
    args.push_back("--nnodes=2");
    args.push_back("/bin/true");
    occupant = StartNode(dir, "occupant", args);
    INFO(occupant->err());
    REQUIRE(WaitJoined(*occupant, "occupant", 20));
  }
  for (int i = 0; i < times; ++i) {
    const Ended e = RunRefused(dir, "refused" + std::to_string(i), d.port, r);
    CheckRefused(e, r);
    if (e.code == -1) break;  // Hung once: enough to show it (and each try costs kHungAfterS).
  }
  if (occupant) {
    kill(occupant->pid, SIGTERM);
    CHECK(WaitCommand(occupant->pid, kHungAfterS) == 143);
  }
}

}  // namespace

TEST_CASE("a join and a stream refused for a full server (max_runs) end the agent in one line within 1 s",
          "[e2e][refusal]") {
  RunRefusalCase({"max_runs full", {"--limit", "max_runs=1"}, {}, true, {}, "second", {"--nnodes=1"}, {},
                  {"could not join run 'second'", "max_runs=1"}},
                 3);
}

TEST_CASE("a join and a stream refused for the server's memory budget end the agent in one line within 1 s",
          "[e2e][refusal]") {
  // 1000 bytes: less than one run costs (4 KiB), so its join and its stream are refused.
  RunRefusalCase({"memory budget full", {"--limit", "max_server_memory=1000"}, {}, false, {}, "budget",
                  {"--nnodes=1"}, {},
                  {"could not join run 'budget'", "memory budget is spent", "max_server_memory"}},
                 3);
}

TEST_CASE("an event stream refused for the memory budget after the join was taken ends the agent within 1 s",
          "[e2e][refusal]") {
  // 10,000 bytes: a run (4 KiB, and 320 B for its one-entry timeline) and its node (640 B) fit, an
  // event stream (18 KiB) does not.
  RunRefusalCase({"memory budget, stream only", {"--limit", "max_server_memory=10000", "--limit", "max_run_events=1"},
                  {}, false, {}, "stream",
                  {"--nnodes=1"}, {}, {"refused this node's event stream", "max_server_memory"}},
                 3);
}

TEST_CASE("an agent with the wrong token ends in one line within 1 s", "[e2e][refusal]") {
  RunRefusalCase({"wrong token", {}, {{"MESHRUN_TOKEN", "right"}}, false, {}, "token", {"--nnodes=1"},
                  {{"MESHRUN_TOKEN", "wrong"}}, {"wrong token"}},
                 2);
}

TEST_CASE("joins that conflict with the run's settings end the agent in one line within 1 s", "[e2e][refusal]") {
  std::vector<Refusal> cases = {
      {"--nnodes conflict", {}, {}, true, {}, "occupant", {"--nnodes=3"}, {},
       {"the node count conflicts in run 'occupant'", "(this node's --nnodes=3"}},
      {"--max_restarts conflict", {}, {}, true, {}, "occupant",
       {"--nnodes=2", "--max_restarts=3"}, {}, {"the restart limit conflicts in run 'occupant'"}},
      {"--node_rank taken", {}, {}, true, {"--node_rank=0"}, "occupant", {"--nnodes=2", "--node_rank=0"}, {},
       {"node rank 0 is already taken in run 'occupant'"}},
  };
  for (const Refusal& r : cases) {
    DYNAMIC_SECTION(r.name) { RunRefusalCase(r, 1); }
  }
}

TEST_CASE("joins and streams past the server's request limits end the agent in one line within 1 s",
          "[e2e][refusal]") {
  std::vector<Refusal> cases = {
      // Checked on the join (its node) before any run is made.
      {"max_nproc", {"--limit", "max_nproc=1"}, {}, false, {}, "nproc", {"--nnodes=1", "--nproc_per_node=2"}, {},
       {"nproc=2: allowed: 1..1 (max_nproc)"}},
      {"min_keep_alive_interval", {"--limit", "min_keep_alive_interval=10"}, {}, false, {}, "keepalive",
       {"--nnodes=1"}, {},
       {"(min_keep_alive_interval)"}},
      // Both the join and the stream name the node: both refused.
      {"max_node_id_bytes", {"--limit", "max_node_id_bytes=4"}, {}, false, {}, "nodeid", {"--nnodes=1"}, {},
       {"max_node_id_bytes=4"}},
      // The round refuses the node when it closes: the answer comes on the stream.
      {"max_world_size", {"--limit", "max_world_size=1"}, {}, false, {}, "world",
       {"--nnodes=1", "--nproc_per_node=2"}, {},
       {"would have world size 2", "(max_world_size)"}},
  };
  for (const Refusal& r : cases) {
    DYNAMIC_SECTION(r.name) { RunRefusalCase(r, 2); }
  }
}
