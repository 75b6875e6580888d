// `meshrun status` against real jobs on loopback: the table and JSON of a
// 2-node job, a job that lost a node, --watch redrawing in place, bad flags.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include "absl/time/clock.h"
#include "common/net.h"
#include "tests/e2e/e2e_util.h"

using namespace meshrun::testing;

namespace {

RunResult Status(int port, std::vector<std::string> extra) {
  std::vector<std::string> argv = {MeshrunBinary(), "status", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return RunCommand(argv, {}, 20);
}

}  // namespace

TEST_CASE("meshrun status shows a 2-node job as a table and as JSON", "[e2e][status]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string go = dir + "/go";
  std::string script = WriteScript(dir, "w.sh", "echo ready\nwhile [ ! -e " + go + " ]; do sleep 0.05; done");
  std::vector<std::string> flags = {"--nnodes=2", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port), "--rdzv_id=st",
                                    "--max_restarts=1"};
  auto a_flags = flags;
  a_flags.push_back("--nproc_per_node=2");
  auto [a, b] = StartTwoNodes(dir, a_flags, script);
  REQUIRE(WaitFor([&] { return CountOccurrences(a.out() + b.out(), "ready") == 4; }, 20));
  RunResult t = Status(port, {"--rdzv_id=st"});
  INFO(t.out << t.err);
  CHECK(t.exit_code == 0);
  CHECK(Contains(t.out, "run 'st' at 127.0.0.1:" + std::to_string(port) +
                            ": running, round 0, restarts 0 of 1, world size 4, nnodes 2\n"));
  CHECK(Contains(t.out, "  nodes: 2 running\n  NODE_RANK"));  // The summary above the table.
  CHECK_FALSE(Contains(t.out, "REPLICA"));                      // A single server, asked alone.
  CHECK(Contains(t.out, "KEEP-ALIVE"));
  CHECK(CountLines(t.out, " running ") == 2);
  CHECK(CountLines(t.out, "127.0.0.1 ") == 1);
  CHECK(CountLines(t.out, "127.0.0.2 ") == 1);
  CHECK(CountLines(t.out, "s ago") == 3);  // The run's start, and each node's keep-alive.
  CHECK(Contains(t.out, "nnodes 2\n  started "));

  RunResult j = Status(port, {"--rdzv_id=st", "--json"});
  INFO(j.out);
  CHECK(j.exit_code == 0);
  CHECK(Contains(j.out, "\"run_id\":\"st\""));
  CHECK(Contains(j.out, "\"state\":\"running\""));
  CHECK(Contains(j.out, "\"max_restarts\":1"));
  CHECK(Contains(j.out, "\"world_size\":4"));
  CHECK(Contains(j.out, "\"addr\":\"127.0.0.2\",\"hostname\":"));
  CHECK(Contains(j.out, "\"node_rank\":1,\"state\":\"running\",\"workers\":2"));

  // Two endpoints, one of them closed: both listed, the closed one unreachable, in the table and the JSON.
  const std::string closed = "127.0.0.1:" + std::to_string(FreePort());
  RunResult two = RunCommand({MeshrunBinary(), "status", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port) + "," +
                              closed, "--rdzv_id=st"},
                             {}, 20);
  INFO(two.out << two.err);
  CHECK(two.exit_code == 0);
  CHECK(Contains(two.out, "  127.0.0.1:" + std::to_string(port) + " serving (a single server)\n"));
  CHECK(Contains(two.out, "  " + closed + " unreachable: Connection refused\n"));
  RunResult two_json = RunCommand({MeshrunBinary(), "status", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port) +
                                   "," + closed, "--rdzv_id=st", "--json"},
                                  {}, 20);
  CHECK(Contains(two_json.out, "\"state\":\"serving\""));
  CHECK(Contains(two_json.out, "\"endpoint\":\"" + closed + "\",\"reason\":"));
  CHECK(Contains(two_json.out, "\"state\":\"unreachable\""));

  RunResult missing = Status(port, {"--rdzv_id=other"});
  CHECK(missing.exit_code == 1);
  CHECK(Contains(missing.err, "has no run 'other'"));

  std::ofstream(go) << "1";
  WaitBoth(a, b);
  CHECK(a.code == 0);
  CHECK(b.code == 0);
}

TEST_CASE("meshrun status while a node is lost: the survivor waits, the loss is counted", "[e2e][status]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string script = WriteScript(dir, "w.sh", "echo ready\nexec sleep 60");
  std::vector<std::string> flags = {"--nnodes=2", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                                    "--rdzv_id=lost", "--max_restarts=1", "--rdzv_conf=join_timeout=30",
                                    "--shutdown_timeout=1"};
  auto [a, b] = StartTwoNodes(dir, flags, script);
  REQUIRE(WaitFor([&] { return CountOccurrences(a.out() + b.out(), "ready") == 2; }, 20));
  kill(b.pid, SIGKILL);
  WaitCommand(b.pid, 10);
  RunResult t;
  REQUIRE(WaitFor([&] {
    // Round 1 opens before node A joins it again: wait for its row.
    t = Status(port, {"--rdzv_id=lost"});
    return Contains(t.out, "round 1") && CountLines(t.out, " joining ") == 1;
  }, 10));
  INFO(t.out << t.err);
  CHECK(Contains(t.out, ": joining, round 1, restarts 0 of 1"));
  CHECK(Contains(t.out, "1 lost so far"));
  CHECK(CountLines(t.out, " joining ") == 1);  // Node A, waiting for a replacement.
  CHECK_FALSE(Contains(t.out, "127.0.0.2"));
  kill(a.pid, SIGTERM);
  const int code = WaitCommand(a.pid, 20);
  INFO("node A's output:\n" << a.out() << a.err());
  CHECK(code == 143);
}

TEST_CASE("meshrun status --watch redraws in place on a terminal, prints plain frames into a pipe, stops at its limit",
          "[e2e][status]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "w.sh", "exec sleep 30");
  int port = FreePort();
  NodeProc n = StartNode(dir, "n", {"--nnodes=1", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                                    "--rdzv_id=watched", script});
  RunResult w;
  REQUIRE(WaitFor([&] {
    w = Status(port, {"--rdzv_id=watched"});
    return w.exit_code == 0 && Contains(w.out, "running");
  }, 20));
  auto started = absl::Now();
  w = Status(port, {"--watch", "--interval=0.2", "--watch-limit=1.1"});
  INFO(w.out << w.err);
  CHECK(w.exit_code == 0);
  CHECK(absl::Now() - started < absl::Seconds(5));
  // stdout is a pipe here: frames one after the other, no control codes.
  CHECK(CountOccurrences(w.out, "\033[") == 0);
  CHECK(CountOccurrences(w.out, "run 'watched'") >= 4);
  // On a terminal (util-linux's script gives it a pseudo-terminal): redrawn in place.
  RunResult tty = RunCommand({"/usr/bin/script", "-qefc",
                              MeshrunBinary() + " status --rdzv_endpoint=127.0.0.1:" + std::to_string(port) +
                                  " --watch --interval=0.2 --watch-limit=1.1",
                              "/dev/null"},
                             {}, 20);
  INFO(tty.out << tty.err);
  CHECK(tty.exit_code == 0);
  CHECK(CountOccurrences(tty.out, "\033[H\033[2J") >= 4);
  CHECK(CountOccurrences(tty.out, "run 'watched'") >= 4);
  kill(n.pid, SIGTERM);
  WaitCommand(n.pid, 20);

  RunResult bad = Status(port, {"--watch", "--interval=0"});
  CHECK(bad.exit_code == 2);
  CHECK(Contains(bad.err, "meshrun status: error: --interval=0: must be 0.1..3600 seconds"));
  RunResult none = RunCommand({MeshrunBinary(), "status"}, {{"PET_RDZV_ENDPOINT", "<unset>"}}, 10);
  CHECK(none.exit_code == 2);
  CHECK(Contains(none.err, "--rdzv_endpoint is required"));
}

TEST_CASE("meshrun status lists a node standing by at MAX after the members", "[e2e][status]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string go = dir + "/go";
  std::string script = WriteScript(dir, "w.sh", "echo ready\nwhile [ ! -e " + go + " ]; do sleep 0.05; done");
  std::vector<std::string> flags = {"--nnodes=1:1", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                                    "--rdzv_id=full", "--rdzv_conf=join_timeout=30"};
  auto [a, b] = StartTwoNodes(dir, flags, script);
  RunResult t;
  REQUIRE(WaitFor([&] {
    t = Status(port, {"--rdzv_id=full"});
    return Contains(t.out, "standing by");
  }, 15));
  INFO(t.out);
  CHECK(Contains(t.out, ": running, round 0, restarts 0 of 0, world size 1, nnodes 1\n"));
  // The member (node rank 0) first, then the node standing by (no rank yet).
  size_t member = t.out.find("  0         ");
  size_t standby = t.out.find("  -         ");
  CHECK(member != std::string::npos);
  CHECK(standby != std::string::npos);
  CHECK(member < standby);
  CHECK(Contains(t.out, "  nodes: 1 running, 1 standing by\n"));
  CHECK(CountLines(t.out, "standing by") == 2);  // The summary, and the node's row.
  std::ofstream(go) << "1";
  WaitBoth(a, b);
  CHECK(a.code == 0);
}

TEST_CASE("meshrun status --events tells a worker failure and the restart it cost, with times and the root cause",
          "[e2e][status]") {
  std::string dir = TempDir();
  Daemon d;
  StartDaemon(d, dir);
  std::string script = WriteScript(dir, "w.sh",
                                   "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ] && exit 3\nexit 0");
  RunResult job = RunCommand({MeshrunBinary(), "--nnodes=1", "--nproc_per_node=2",
                              "--rdzv_endpoint=127.0.0.1:" + std::to_string(d.port), "--rdzv_id=ev",
                              "--max_restarts=2", script},
                             {}, 60);
  REQUIRE(job.exit_code == 0);
  RunResult t = Status(d.port, {"--rdzv_id=ev", "--events"});
  INFO(t.out << t.err);
  CHECK(t.exit_code == 0);
  const std::string cause = "rank 1 (local rank 1) of node rank 0 (" + meshrun::Hostname() + ") exited with code 3";
  CHECK(Contains(t.out, "ago; last root cause "));
  CHECK(Contains(t.out, " ago: " + cause + "\n"));
  CHECK(Contains(t.out, "  events (UTC, oldest first):\n"));
  // In order: round 0, the restart with its root cause, round 1, the end.
  const size_t r0 = t.out.find("  round      round 0 closed: 1 node(s), world size 2\n");
  const size_t restart = t.out.find("  restart    restart 1 of 2 (round 1): " + cause + "\n");
  const size_t r1 = t.out.find("  round      round 1 closed: 1 node(s), world size 2\n");
  const size_t end = t.out.find("  finished   every node finished round 1 (1 restart(s) used)\n");
  REQUIRE(r0 != std::string::npos);
  REQUIRE(restart != std::string::npos);
  REQUIRE(r1 != std::string::npos);
  REQUIRE(end != std::string::npos);
  CHECK(r0 < restart);
  CHECK(restart < r1);
  CHECK(r1 < end);
  CHECK(CountLines(t.out, "    20") == 4);  // Each event with its date.
  RunResult plain = Status(d.port, {"--rdzv_id=ev"});
  CHECK_FALSE(Contains(plain.out, "events ("));  // Only when asked.
  RunResult j = Status(d.port, {"--rdzv_id=ev", "--events", "--json"});
  INFO(j.out);
  CHECK(Contains(j.out, "\"kind\":\"restart\""));
  CHECK(Contains(j.out, "\"summary\":\"" + cause + "\""));
}
