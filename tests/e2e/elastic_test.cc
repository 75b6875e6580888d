// Fault tolerance end to end: restarts across nodes, node loss and return,
// stale nodes, signals, logs, libmesh across a restart. Loopback only.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <set>

#include "absl/time/clock.h"
#include "common/net.h"
#include "tests/e2e/e2e_util.h"

using namespace meshrun::testing;

namespace {

std::vector<std::string> Node(int port, const std::string& run, const std::string& nnodes,
                              std::vector<std::string> rest) {
  std::vector<std::string> a = {"--nnodes=" + nnodes, "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                                "--rdzv_id=" + run};
  a.insert(a.end(), rest.begin(), rest.end());
  return a;
}

std::vector<pid_t> Pids(const std::string& text, const std::string& tag) {
  std::vector<pid_t> out;
  std::regex re(tag + " pid=(\\d+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back(std::stoi((*it)[1]));
  }
  return out;
}

}  // namespace

TEST_CASE("two nodes: a worker failing on node A restarts both nodes in the same round", "[e2e][elastic]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string script = WriteScript(dir, "f.sh",
      "echo \"S rank=$RANK round=$MESHRUN_ROUND restarts=$TORCHELASTIC_RESTART_COUNT\"\n"
      "[ \"$RANK\" = 1 ] && [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && exit 5\nsleep 0.3");
  auto [a, b] = StartTwoNodes(dir, Node(port, "r2", "2", {"--nproc_per_node=2", "--max_restarts=1",
                                                          "--shutdown_timeout=2"}), script);
  WaitBoth(a, b);
  INFO(a.err() << "\n---\n" << b.err());
  CHECK(a.code == 0);
  CHECK(b.code == 0);
  CHECK(CountOccurrences(a.out() + b.out(), "round=1 restarts=1") == 4);
}

TEST_CASE("two nodes: node B's workers finished when node A's worker fails: B leaves its exit barrier and restarts too",
          "[e2e][elastic]") {
  // Round 0: node B's workers (ranks 2, 3) exit 0 at once and leave their
  // pids; rank 1 on node A fails once both are gone (B's agent is then at
  // its exit barrier). The restart takes B too: every rank runs round 1.
  std::string dir = TempDir();
  int port = FreePort();
  std::string script = WriteScript(dir, "f.sh",
      "echo \"S rank=$RANK round=$MESHRUN_ROUND restarts=$TORCHELASTIC_RESTART_COUNT\"\n"
      "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then\n"
      "  case $RANK in\n"
      "    2|3) echo $$ > " + dir + "/b.$RANK; exit 0;;\n"
      "    1) for i in $(seq 600); do\n"
      "         if [ -s " + dir + "/b.2 ] && [ -s " + dir + "/b.3 ] && ! kill -0 $(cat " + dir + "/b.2) 2>/dev/null &&\n"
      "            ! kill -0 $(cat " + dir + "/b.3) 2>/dev/null; then exit 5; fi\n"
      "         sleep 0.05\n"
      "       done; exit 6;;\n"
      "  esac\n"
      "fi\n"
      "sleep 0.3");
  auto [a, b] = StartTwoNodes(dir, Node(port, "rb", "2", {"--nproc_per_node=2", "--max_restarts=1",
                                                          "--shutdown_timeout=2"}), script);
  WaitBoth(a, b);
  INFO(a.err() << "\n---\n" << b.err());
  CHECK(a.code == 0);
  CHECK(b.code == 0);
  CHECK(CountOccurrences(a.out() + b.out(), "round=1 restarts=1") == 4);
  CHECK(Contains(a.err() + b.err(), "this node's workers had finished; restarting them (round 1)"));
}

TEST_CASE("two nodes, no restarts left: both exit with the code: both name node A's rank", "[e2e][elastic]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string script = WriteScript(dir, "f.sh", "[ \"$RANK\" = 1 ] && exit 5\nexec sleep 30");
  auto [a, b] = StartTwoNodes(dir, Node(port, "r0", "2", {"--nproc_per_node=2", "--shutdown_timeout=2"}), script);
  WaitBoth(a, b);
  CHECK(a.code == 5);
  CHECK(b.code == 5);
  for (const NodeProc* n : {&a, &b}) {
    INFO(n->err());
    CHECK(Contains(n->err(), "rank      : 1 (local_rank: 1)"));
    CHECK(Contains(n->err(), "(node rank 0)"));
  }
}

TEST_CASE("two failures on two nodes in one round cost one restart", "[e2e][elastic]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string script = WriteScript(dir, "f.sh",
      "echo \"S rank=$RANK restarts=$TORCHELASTIC_RESTART_COUNT\"\n"
      "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then case $RANK in 0|3) exit 4;; esac; exec sleep 30; fi\nexit 0");
  auto [a, b] = StartTwoNodes(dir, Node(port, "two", "2", {"--nproc_per_node=2", "--max_restarts=1",
                                                           "--shutdown_timeout=2"}), script);
  WaitBoth(a, b);
  INFO(a.err() << "\n---\n" << b.err());
  CHECK(a.code == 0);
  CHECK(b.code == 0);
  CHECK(CountOccurrences(a.out() + b.out(), "restarts=1") == 4);
}

TEST_CASE("elastic 1:2: a SIGKILLed node's workers die: the survivor re-forms halved: a new node rejoins",
          "[e2e][elastic]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string script = WriteScript(dir, "w.sh",
      "echo \"S node=$GROUP_RANK world=$WORLD_SIZE round=$MESHRUN_ROUND pid=$$\"\n"
      "sleep 300 &\necho \"G pid=$!\"\nwait");
  auto args = [&](const std::string& addr) {
    return Node(port, "el", "1:2", {"--nproc_per_node=2", "--local_addr=" + addr, "--shutdown_timeout=1",
                                    "--rdzv_conf=last_call_timeout=0.5", script});
  };
  // A hosts the server (B is killed below): B starts once A listens.
  NodeProc a = StartNode(dir, "a", args("127.0.0.1"));
  REQUIRE(WaitFor([&] { return meshrun::PortInUse("127.0.0.1", port); }, 20));
  NodeProc b = StartNode(dir, "b", args("127.0.0.2"));
  REQUIRE(WaitFor([&] { return CountOccurrences(a.out(), "world=4 round=0") == 2 &&
                               CountOccurrences(b.out(), "world=4 round=0") == 2 && Pids(b.out(), "G").size() == 2; },
                  20));
  std::vector<pid_t> b_workers = Pids(b.out(), "S node=1 world=4 round=0");
  std::vector<pid_t> b_grandchildren = Pids(b.out(), "G");
  auto killed = absl::Now();
  kill(b.pid, SIGKILL);
  CHECK(WaitCommand(b.pid, 5) == 128 + SIGKILL);
  // Node B's workers and their children are gone within 2 s, and node A's
  // workers restart with WORLD_SIZE halved within a second (3 s for both):
  // in the plain build; the sanitizer build only has to get there (30 s).
  const double gone_s = kTimingBounds ? 2.5 : 30, halved_s = kTimingBounds ? 1.5 : 30;
  const bool gone = WaitFor([&] {
    for (pid_t p : b_grandchildren) if (Alive(p)) return false;
    return true;
  }, gone_s);
  const bool halved = WaitFor([&] { return CountOccurrences(a.out(), "world=2 round=1") == 2; }, halved_s);
  const absl::Duration took = absl::Now() - killed;
  WARN("SIGKILLed node: its grandchildren gone and the survivor re-formed after " << absl::FormatDuration(took));
  CHECK(gone);
  CHECK(halved);
  if (kTimingBounds) CHECK(took < absl::Seconds(3));
  (void)b_workers;
  // A new node is taken back in.
  NodeProc c = StartNode(dir, "c", args("127.0.0.2"));
  CHECK(WaitFor([&] { return CountOccurrences(a.out(), "world=4 round=2") == 2 &&
                             CountOccurrences(c.out(), "world=4 round=2") == 2; }, 10));
  // The node without the server first: a meshrun that hosts it stops
  // serving at once on SIGTERM, and a node that lost the server before its
  // own SIGTERM arrived would exit 1 for the lost server.
  kill(c.pid, SIGTERM);
  CHECK(WaitCommand(c.pid, 20) == 143);
  kill(a.pid, SIGTERM);
  CHECK(WaitCommand(a.pid, 20) == 143);
  INFO(a.err());
  CHECK(Contains(a.err(), "was lost: its agent disconnected"));
}

TEST_CASE("elastic 1:2: a SIGSTOPped node is dropped after the keep-alive limit, then rejoins as stale",
          "[e2e][elastic]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string script = WriteScript(dir, "w.sh", "echo \"S node=$GROUP_RANK world=$WORLD_SIZE round=$MESHRUN_ROUND\"\nexec sleep 300");
  auto args = [&](const std::string& addr) {
    return Node(port, "stop", "1:2", {"--nproc_per_node=2", "--local_addr=" + addr, "--shutdown_timeout=1",
                                      "--rdzv_conf=last_call_timeout=0.5,keep_alive_interval=0.3,keep_alive_max_attempt=2",
                                      script});
  };
  // A hosts the server (B is stopped below): B starts once A listens.
  NodeProc a = StartNode(dir, "a", args("127.0.0.1"));
  REQUIRE(WaitFor([&] { return meshrun::PortInUse("127.0.0.1", port); }, 20));
  NodeProc b = StartNode(dir, "b", args("127.0.0.2"));
  REQUIRE(WaitFor([&] { return CountOccurrences(a.out() + b.out(), "world=4 round=0") == 4; }, 20));
  kill(b.pid, SIGSTOP);
  // A re-forms alone after about 0.3 s x 2.
  CHECK(WaitFor([&] { return CountOccurrences(a.out(), "world=2 round=1") == 2; }, 5));
  kill(b.pid, SIGCONT);
  // B finds itself stale, stops its workers and rejoins: the job re-forms with 4.
  CHECK(WaitFor([&] { return CountOccurrences(a.out() + b.out(), "world=4 round=2") == 4; }, 15));
  INFO(b.err());
  CHECK(Contains(b.err(), "declared lost"));
  // B (no server) first, as above.
  kill(b.pid, SIGTERM);
  CHECK(WaitCommand(b.pid, 20) == 143);
  kill(a.pid, SIGTERM);
  CHECK(WaitCommand(a.pid, 20) == 143);
}

TEST_CASE("SIGTERM: workers that ignore it are killed after the grace period, grandchildren too: exit 143",
          "[e2e][elastic]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "stubborn.sh",
                                   "trap '' TERM\nsleep 300 &\necho \"G pid=$!\"\nwhile :; do sleep 0.1; done");
  NodeProc n = StartNode(dir, "n", {"--standalone", "--nproc_per_node=2", "--shutdown_timeout=1", script});
  REQUIRE(WaitFor([&] { return Pids(n.out(), "G").size() == 2; }, 10));
  auto sent = absl::Now();
  kill(n.pid, SIGTERM);
  CHECK(WaitCommand(n.pid, 20) == 143);
  CHECK(absl::Now() - sent >= absl::Milliseconds(900));
  CHECK(absl::Now() - sent < absl::Seconds(5));
  for (pid_t p : Pids(n.out(), "G")) CHECK_FALSE(Alive(p));
}

TEST_CASE("SIGUSR1 reaches every worker's handler and the job goes on", "[e2e][elastic]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "usr1.sh",
      "trap 'echo \"USR1 at $RANK\"; exit 0' USR1\necho \"ready $RANK\"\nwhile :; do sleep 0.05; done");
  NodeProc n = StartNode(dir, "n", {"--standalone", "--nproc_per_node=3",
                                    "--signals_to_handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1", script});
  REQUIRE(WaitFor([&] { return CountOccurrences(n.out(), "ready") == 3; }, 10));
  kill(n.pid, SIGUSR1);
  // Each handler exits 0, so the job ends normally: it was not stopped.
  CHECK(WaitCommand(n.pid, 20) == 0);
  CHECK(CountOccurrences(n.out(), "USR1 at") == 3);
}

TEST_CASE("log_dir keeps both attempts' files for every rank", "[e2e][elastic]") {
  std::string dir = TempDir();
  std::string logs = dir + "/logs";
  // Rank 2 fails in round 0 only after every rank has written its lines
  // (a marker each), so the stop cannot cut a rank short.
  std::string script = WriteScript(dir, "l.sh",
      "echo \"out of $RANK in round $MESHRUN_ROUND\"\necho \"err of $RANK\" >&2\n"
      "touch " + dir + "/wrote_${RANK}_$MESHRUN_ROUND\n"
      "if [ \"$RANK\" = 2 ] && [ \"$MESHRUN_ROUND\" = 0 ]; then\n"
      "  i=0; while [ $i -lt 200 ] && [ $(ls " + dir + " | grep -c '^wrote_._0$') -lt 3 ]; do sleep 0.05; i=$((i+1)); done\n"
      "  exit 3\nfi\nexit 0");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=3", "--max_restarts=1",
                            "--log_dir=" + logs, script}, {}, 60);
  REQUIRE(r.exit_code == 0);
  std::vector<std::filesystem::path> runs(std::filesystem::directory_iterator(logs), {});
  REQUIRE(runs.size() == 1);
  for (int round : {0, 1}) {
    for (int rank = 0; rank < 3; ++rank) {
      std::string base = (runs[0] / ("attempt_" + std::to_string(round)) / ("rank_" + std::to_string(rank))).string();
      INFO(base);
      CHECK(Contains(ReadFile(base + ".stdout"), "out of " + std::to_string(rank) + " in round " + std::to_string(round)));
      CHECK(Contains(ReadFile(base + ".stderr"), "err of " + std::to_string(rank)));
    }
  }
  // Console lines are whole and prefixed with node and global rank.
  CHECK(Contains(r.out, "[n0:r2] out of 2 in round 1"));
  // A second run with the same run id does not overwrite the first.
  RunResult again = RunCommand({MeshrunBinary(), "--nnodes=1", "--rdzv_endpoint=127.0.0.1:" + std::to_string(FreePort()),
                                "--rdzv_id=same", "--log_dir=" + logs, script}, {}, 60);
  usleep(1100000);
  RunResult third = RunCommand({MeshrunBinary(), "--nnodes=1", "--rdzv_endpoint=127.0.0.1:" + std::to_string(FreePort()),
                                "--rdzv_id=same", "--log_dir=" + logs, script}, {}, 60);
  std::vector<std::filesystem::path> all(std::filesystem::directory_iterator(logs), {});
  CHECK(all.size() == 3);
}

TEST_CASE("the failure summary shows the error file's message", "[e2e][elastic]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "ef.sh",
      "if [ \"$RANK\" = 1 ]; then printf '{\"message\": {\"message\": \"ValueError: shard 7 is empty\", "
      "\"extraInfo\": {\"timestamp\": \"0\"}}}' > \"$TORCHELASTIC_ERROR_FILE\"; exit 2; fi\nexec sleep 30");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", script}, {}, 60);
  CHECK(r.exit_code == 2);
  CHECK(Contains(r.err, "message   : ValueError: shard 7 is empty"));
  CHECK(Contains(r.err, "error_file: /"));
}

TEST_CASE("libmesh across a restart: two_d_setup rebuilds its mesh in round 1", "[e2e][elastic][mesh]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "m.sh",
      BinaryDir() + "/examples/two_d_setup --device cpu || exit $?\n"
      "[ \"$MESHRUN_ROUND\" = 0 ] && [ \"$RANK\" = 5 ] && exit 1\nexit 0");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=8", "--max_restarts=1", script}, {}, 120);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.err, "restart 1 of 1 (round 1)"));
  CHECK(CountOccurrences(r.out, "replicate_sum=") >= 8);
}

TEST_CASE("fixed size, no restarts left: losing a node fails the others at once, naming it", "[e2e][elastic]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string script = WriteScript(dir, "w.sh", "echo \"S node=$GROUP_RANK\"\nexec sleep 300");
  // A hosts the server (B is killed below): B starts once A listens.
  auto args = [&](const std::string& addr) {
    return Node(port, "fixed", "2", {"--shutdown_timeout=1", "--local_addr=" + addr, script});
  };
  NodeProc a = StartNode(dir, "a", args("127.0.0.1"));
  REQUIRE(WaitFor([&] { return meshrun::PortInUse("127.0.0.1", port); }, 20));
  NodeProc b = StartNode(dir, "b", args("127.0.0.2"));
  REQUIRE(WaitFor([&] { return CountOccurrences(a.out() + b.out(), "S node=") == 2; }, 20));
  kill(b.pid, SIGKILL);
  auto start = absl::Now();
  a.code = WaitCommand(a.pid, 30);
  CHECK(WaitCommand(b.pid, 5) == 128 + SIGKILL);
  INFO(a.err());
  CHECK(a.code == 1);
  CHECK(absl::Now() - start < absl::Seconds(5));
  CHECK(Contains(a.err(), "was lost: its agent disconnected"));
}

TEST_CASE("a node standing by at MAX is released when the job finishes", "[e2e][elastic]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string script = WriteScript(dir, "w.sh", "echo running\nsleep 2");
  NodeProc a = StartNode(dir, "a", Node(port, "full", "1", {script}));
  // B comes once A's worker runs: the run is full, and B is the one that
  // stands by.
  REQUIRE(WaitFor([&] { return Contains(a.out(), "running"); }, 20));
  NodeProc b = StartNode(dir, "b", Node(port, "full", "1", {script}));
  a.code = WaitCommand(a.pid, 30);
  b.code = WaitCommand(b.pid, 30);
  INFO(b.err());
  CHECK(a.code == 0);
  // The node that stood by ran nothing: not a success, and it says why.
  CHECK(b.code == 1);
  CHECK(Contains(b.err(), "finished while this node stood by; this node ran nothing"));
}
