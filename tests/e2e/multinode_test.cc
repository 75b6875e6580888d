// Several nodes on loopback: each node is a real meshrun process; the first
// to bind the endpoint's port hosts the server, the others join as clients.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <regex>
#include <set>

#include "absl/time/clock.h"
#include "common/net.h"
#include "tests/e2e/e2e_util.h"
#include "tests/support/skip.h"

using namespace meshrun::testing;

namespace {

// Each worker prints one line: "W rank local world group master round".
std::string EnvScript(const std::string& dir) {
  return WriteScript(dir, "w.sh",
                     "printf 'W %s %s %s %s %s:%s %s\\n' $RANK $LOCAL_RANK $WORLD_SIZE $GROUP_RANK "
                     "$MASTER_ADDR $MASTER_PORT $MESHRUN_ROUND");
}

struct Line {
  int rank, local, world, group;
  std::string master, round;
};

std::vector<Line> Lines(const std::string& out) {
  std::vector<Line> v;
  std::regex re("W (\\d+) (\\d+) (\\d+) (\\d+) (\\S+) (\\d+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it) {
    v.push_back({std::stoi((*it)[1]), std::stoi((*it)[2]), std::stoi((*it)[3]), std::stoi((*it)[4]), (*it)[5],
                 (*it)[6]});
  }
  return v;
}

std::vector<std::string> Common(int port, const std::string& run, int nnodes) {
  return {"--nnodes=" + std::to_string(nnodes), "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
          "--rdzv_id=" + run};
}

std::vector<std::string> Plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Node `name` must have run workers with ranks [first, first+n) on node rank
// `group`, in one world of `world`, sharing `master` and `round`.
void CheckNode(const NodeProc& node, int first, int n, int group, int world, std::string* master) {
  INFO(node.err());
  REQUIRE(node.code == 0);
  auto lines = Lines(node.out());
  REQUIRE(static_cast<int>(lines.size()) == n);
  std::set<int> ranks;
  for (const auto& l : lines) {
    ranks.insert(l.rank);
    CHECK(l.rank == first + l.local);
    CHECK(l.world == world);
    CHECK(l.group == group);
    CHECK(l.round == "0");
    if (master->empty()) *master = l.master;
    CHECK(l.master == *master);
  }
  CHECK(static_cast<int>(ranks.size()) == n);
}

}  // namespace

TEST_CASE("two nodes, the second 2 s late: contiguous ranks, one master: the late one is a client",
          "[e2e][multinode]") {
  std::string dir = TempDir();
  std::string script = EnvScript(dir);
  int port = FreePort();
  // Node A advertises 127.0.0.1, node B 127.0.0.2: the order is by address,
  // whoever starts first (and so hosts the server).
  for (bool a_first : {true, false}) {
    DYNAMIC_SECTION((a_first ? "A first" : "B first")) {
      std::string run = a_first ? "late-a" : "late-b";
      auto a_args = Plus(Common(port, run, 2), {"--nproc_per_node=2", "--local_addr=127.0.0.1", script});
      auto b_args = Plus(Common(port, run, 2), {"--nproc_per_node=2", "--local_addr=127.0.0.2", script});
      NodeProc first = StartNode(dir, run + "1", a_first ? a_args : b_args);
      usleep(a_first ? 2000000 : 500000);
      NodeProc second = StartNode(dir, run + "2", a_first ? b_args : a_args);
      first.code = WaitCommand(first.pid, 60);
      second.code = WaitCommand(second.pid, 60);
      const NodeProc& a = a_first ? first : second;
      const NodeProc& b = a_first ? second : first;
      std::string master;
      CheckNode(a, 0, 2, 0, 4, &master);
      CheckNode(b, 2, 2, 1, 4, &master);
      CHECK(master.rfind("127.0.0.1:", 0) == 0);
      CHECK(Contains(first.err(), "1/2 nodes joined"));
      CHECK_FALSE(Contains(second.err(), "error"));
    }
  }
}

TEST_CASE("node_rank decides the order when the nodes give exactly 0..n-1", "[e2e][multinode]") {
  std::string dir = TempDir();
  std::string script = EnvScript(dir);
  int port = FreePort();
  NodeProc a = StartNode(dir, "a", Plus(Common(port, "nr", 2), {"--nproc_per_node=2", "--node_rank=1", script}));
  usleep(300000);
  NodeProc b = StartNode(dir, "b", Plus(Common(port, "nr", 2), {"--nproc_per_node=2", "--node_rank=0", script}));
  a.code = WaitCommand(a.pid, 60);
  b.code = WaitCommand(b.pid, 60);
  std::string master;
  CheckNode(b, 0, 2, 0, 4, &master);
  CheckNode(a, 2, 2, 1, 4, &master);
}

TEST_CASE("a duplicate --node_rank is refused naming both nodes", "[e2e][multinode]") {
  std::string dir = TempDir();
  int port = FreePort();
  auto args = Plus(Common(port, "dup", 2), {"--node_rank=0", "--rdzv_conf=join_timeout=20", "/bin/true"});
  NodeProc a = StartNode(dir, "a", args);
  // The two nodes are identical: the second to join is refused. B starts
  // once the server has A's join (A reports the join progress), so B is it.
  REQUIRE(WaitJoined(a, "dup", 20));
  NodeProc b = StartNode(dir, "b", args);
  b.code = WaitCommand(b.pid, 30);
  kill(a.pid, SIGTERM);
  a.code = WaitCommand(a.pid, 30);
  CHECK(a.code == 143);  // Still waiting for a second node: stopped by the signal.
  CHECK(b.code == 1);
  // The server's words, and the agent's flag beside them.
  CHECK(Contains(b.err(), "node rank 0 is already taken in run 'dup'"));
  CHECK(Contains(b.err(), "(this node's --node_rank=0; each node gives its own --node_rank)"));
  CHECK(CountOccurrences(b.err(), "(pid ") == 2);
}

TEST_CASE("three nodes with 1, 2 and 3 workers: WORLD_SIZE 6, prefix-sum ranks", "[e2e][multinode]") {
  std::string dir = TempDir();
  std::string script = EnvScript(dir);
  int port = FreePort();
  std::vector<NodeProc> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(StartNode(dir, "n" + std::to_string(i),
                              Plus(Common(port, "hetero", 3), {"--nproc_per_node=" + std::to_string(i + 1),
                                                               "--local_addr=127.0.0." + std::to_string(i + 1),
                                                               script})));
    usleep(200000);
  }
  for (auto& n : nodes) n.code = WaitCommand(n.pid, 60);
  std::string master;
  CheckNode(nodes[0], 0, 1, 0, 6, &master);
  CheckNode(nodes[1], 1, 2, 1, 6, &master);
  CheckNode(nodes[2], 3, 3, 2, 6, &master);
}

TEST_CASE("a node alone past join_timeout exits naming endpoint, run and count", "[e2e][multinode]") {
  std::string dir = TempDir();
  int port = FreePort();
  auto start = absl::Now();
  RunResult r = RunCommand({MeshrunBinary(), "--nnodes=2", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                            "--rdzv_id=lonely", "--rdzv_conf=join_timeout=3", "/bin/true"}, {}, 30);
  CHECK(r.exit_code == 1);
  CHECK(r.seconds < 5.5);
  CHECK(Contains(r.err, "127.0.0.1:" + std::to_string(port)));
  CHECK(Contains(r.err, "'lonely'"));
  CHECK(Contains(r.err, "1 of 2 nodes joined"));
  (void)start;
}

TEST_CASE("nodes that disagree on nnodes are refused naming the field", "[e2e][multinode]") {
  std::string dir = TempDir();
  int port = FreePort();
  NodeProc a = StartNode(dir, "a", Plus(Common(port, "conf", 2), {"--rdzv_conf=join_timeout=20", "/bin/true"}));
  // A's configuration is the run's once the server has its join: B, which
  // disagrees, is the one refused.
  REQUIRE(WaitJoined(a, "conf", 20));
  RunResult b = RunCommand({MeshrunBinary(), "--nnodes=3", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                            "--rdzv_id=conf", "/bin/true"}, {}, 30);
  kill(a.pid, SIGTERM);
  CHECK(WaitCommand(a.pid, 30) == 143);
  CHECK(b.exit_code == 1);
  // The server's words (the run's node count), and the agent's flag beside them.
  CHECK(Contains(b.err, "the node count conflicts in run 'conf': this node's join asks for 3 nodes, the run has 2"));
  CHECK(Contains(b.err, "(this node's --nnodes=3; every node of a job gives the same --nnodes)"));
}

TEST_CASE("a worker failing on node B stops both nodes: A's summary names B's rank", "[e2e][multinode]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string script = WriteScript(dir, "f.sh", "[ \"$RANK\" = 3 ] && exit 9\nexec sleep 60");
  auto [a, b] = StartTwoNodes(dir, Plus(Common(port, "fail", 2), {"--nproc_per_node=2", "--shutdown_timeout=2"}),
                              script, 300000);
  WaitBoth(a, b);
  INFO(a.err() << "\n----\n" << b.err());
  CHECK(a.code == 9);
  CHECK(b.code == 9);
  CHECK(Contains(a.err(), "rank      : 3 (local_rank: 1)"));
  CHECK(Contains(a.err(), "(node rank 1)"));
  CHECK(Contains(b.err(), "rank      : 3 (local_rank: 1)"));
}

TEST_CASE("static backend: --master_addr, --master_port and --node_rank", "[e2e][multinode]") {
  std::string dir = TempDir();
  std::string script = EnvScript(dir);
  int port = FreePort();
  auto common = std::vector<std::string>{"--rdzv_backend=static", "--nnodes=2", "--nproc_per_node=2",
                                         "--master_addr=127.0.0.1", "--master_port=" + std::to_string(port)};
  NodeProc b = StartNode(dir, "b", Plus(common, {"--node_rank=1", script}));
  usleep(300000);
  NodeProc a = StartNode(dir, "a", Plus(common, {"--node_rank=0", script}));
  a.code = WaitCommand(a.pid, 60);
  b.code = WaitCommand(b.pid, 60);
  std::string master;
  CheckNode(a, 0, 2, 0, 4, &master);
  CheckNode(b, 2, 2, 1, 4, &master);
  // As under torchrun: MASTER_PORT is --master_port, node rank 0's agent
  // store; the rendezvous server it hosts took another port.
  CHECK(master == "127.0.0.1:" + std::to_string(port));
}

namespace {

// A static-backend job of 2 nodes x 1 worker on --master_port=`port` with
// `conf` (--rdzv_conf=...): both nodes must run their ranks; MASTER_PORT is
// --master_port with the agent store, another port (worker rank 0's own
// TCPStore) without. Returns node rank 0's process, for its log.
NodeProc RunStaticPair(const std::string& dir, const std::string& script, int port, const std::string& conf,
                       const std::map<std::string, std::string>& env, bool agent_store = true) {
  auto common = std::vector<std::string>{"--nnodes=2", "--nproc_per_node=1", "--master_addr=127.0.0.1",
                                         "--master_port=" + std::to_string(port), conf};
  NodeProc b = StartNode(dir, "b", Plus(common, {"--node_rank=1", script}), env);
  NodeProc a = StartNode(dir, "a", Plus(common, {"--node_rank=0", script}), env);
  a.code = WaitCommand(a.pid, 60);
  b.code = WaitCommand(b.pid, 60);
  std::string master;
  CheckNode(a, 0, 1, 0, 2, &master);
  CheckNode(b, 1, 1, 1, 2, &master);
  const std::string static_master = "127.0.0.1:" + std::to_string(port);
  if (agent_store) {
    CHECK(master == static_master);
  } else {
    CHECK(master != static_master);  // Worker rank 0's own TCPStore port.
  }
  return a;
}

}  // namespace

TEST_CASE("static backend: rdzv_conf server_port pins the hosted server's port, and agent_store=0 gives it --master_port",
          "[e2e][multinode]") {
  std::string dir = TempDir();
  std::string script = EnvScript(dir);
  const std::map<std::string, std::string> env = {{"MESHRUN_LOG_LEVEL", "info"}};
  SECTION("server_port") {
    int port = FreePort();
    int server_port = FreePort();
    NodeProc a = RunStaticPair(dir, script, port, "--rdzv_conf=server_port=" + std::to_string(server_port), env);
    CHECK(Contains(a.err(), "hosting the rendezvous server on port " + std::to_string(server_port)));
  }
  SECTION("agent_store=0") {
    int port = FreePort();
    NodeProc a = RunStaticPair(dir, script, port, "--rdzv_conf=agent_store=0", env, /*agent_store=*/false);
    CHECK(Contains(a.err(), "hosting the rendezvous server on port " + std::to_string(port)));
  }
}

TEST_CASE("a node that finishes early waits at the exit barrier: both exit 0", "[e2e][multinode]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string script = WriteScript(dir, "e.sh", "[ \"$GROUP_RANK\" = 1 ] && sleep 3\nexit 0");
  auto [a, b] = StartTwoNodes(dir, Plus(Common(port, "early", 2), {"--nproc_per_node=2"}), script);
  WaitBoth(a, b);
  INFO(a.err() << "\n----\n" << b.err());
  CHECK(a.code == 0);
  CHECK(b.code == 0);
  CHECK_FALSE(Contains(a.err(), "lost"));
  CHECK_FALSE(Contains(b.err(), "lost"));
}

TEST_CASE("a 2-D PyTorch mesh over 2 nodes x 4 workers: a shard group per node, replicate groups across",
          "[e2e][multinode][torch]") {
  std::string py = TorchPython();
  if (py.empty()) MESHRUN_SKIP("no python3 with torch (install python3-torch)");
  const std::string api = TorchMeshApi(py);
  std::string dir = TempDir();
  int port = FreePort();
  std::string prog = SourceDir() + "/tests/py/two_d_mesh.py";
  std::map<std::string, std::string> env = {{"PYTHON_EXEC", py}};
  NodeProc a = StartNode(dir, "a", Plus(Common(port, "mesh2", 2), {"--nproc_per_node=4", "--local_addr=127.0.0.1",
                                                                   prog}), env);
  NodeProc b = StartNode(dir, "b", Plus(Common(port, "mesh2", 2), {"--nproc_per_node=4", "--local_addr=127.0.0.2",
                                                                   prog}), env);
  a.code = WaitCommand(a.pid, 240);
  b.code = WaitCommand(b.pid, 240);
  INFO(a.err() << "\n----\n" << b.err());
  CHECK(a.code == 0);
  CHECK(b.code == 0);
  // Node A (127.0.0.1, node rank 0) holds ranks 0-3, row 0 of the (2, 4)
  // mesh; B ranks 4-7, row 1: each shard group is one node, each
  // replicate group spans both.
  for (int rank = 0; rank < 8; ++rank) {
    const NodeProc& n = rank < 4 ? a : b;
    CHECK(Contains(n.out(), "rank=" + std::to_string(rank) + " api=" + api + " mesh=2x4 coords=(" +
                                std::to_string(rank / 4) + ", " + std::to_string(rank % 4) + ") shard_sum=" +
                                std::to_string(rank < 4 ? 6 : 22) + " replicate_sum=" +
                                std::to_string(2 * (rank % 4) + 4) + " OK"));
  }
  CHECK(CountOccurrences(a.out() + b.out(), " OK") == 8);
}

TEST_CASE("killing the meshrun that hosts the server stops the other node, naming the endpoint",
          "[e2e][multinode]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string worker = WriteScript(dir, "w.sh", "echo started\nexec sleep 60");
  NodeProc a = StartNode(dir, "a", Plus(Common(port, "hostdies", 2), {"--nproc_per_node=1", worker}));
  // a hosts the server (both run on this host: the first to take the port
  // does): b starts once a listens, and a is killed once both workers run.
  for (int i = 0; i < 400 && !meshrun::PortInUse("127.0.0.1", port); ++i) usleep(50000);
  CHECK(meshrun::PortInUse("127.0.0.1", port));
  NodeProc b = StartNode(dir, "b", Plus(Common(port, "hostdies", 2), {"--nproc_per_node=1", "--shutdown_timeout=1",
                                                                       worker}));
  for (int i = 0; i < 400 && CountOccurrences(a.out() + b.out(), "started") < 2; ++i) usleep(50000);
  INFO(b.err() << "\n--- a:\n" << a.err());
  CHECK(CountOccurrences(a.out() + b.out(), "started") == 2);  // (Going on either way: the waits below end both.)
  kill(a.pid, SIGKILL);
  auto start = absl::Now();
  b.code = WaitCommand(b.pid, 30);
  WaitCommand(a.pid, 5);
  INFO(b.err());
  CHECK(b.code == 1);
  CHECK(absl::Now() - start < absl::Seconds(5));
  CHECK(Contains(b.err(), "127.0.0.1:" + std::to_string(port)));
}

TEST_CASE("a permanent failure on node B stops both nodes at once with no restart used", "[e2e][multinode]") {
  std::string dir = TempDir();
  int port = FreePort();
  std::string script = WriteScript(dir, "p.sh",
      "echo \"start round=$MESHRUN_ROUND code=$MESHRUN_PERMANENT_FAILURE_EXIT_CODE\"\n"
      "[ \"$RANK\" = 3 ] && sleep 0.5 && exit 78\nexec sleep 60");
  auto started = absl::Now();
  auto [a, b] = StartTwoNodes(
      dir, Plus(Common(port, "perm", 2), {"--nproc_per_node=2", "--max_restarts=3", "--shutdown_timeout=2"}), script,
      300000);
  WaitBoth(a, b);
  INFO(a.err() << "\n----\n" << b.err());
  CHECK(absl::Now() - started < absl::Seconds(15));
  CHECK(a.code == 78);
  CHECK(b.code == 78);
  for (const NodeProc* n : {&a, &b}) {
    CHECK(Contains(n->err(), "a permanent failure, not restarted"));
    CHECK(Contains(n->err(), "permanent : yes, not restarted (exit code 78 is --permanent_failure_exit_code); "
                             "restarts used: 0 of 3"));
    CHECK_FALSE(Contains(n->err(), "restart 1 of 3"));
    CHECK_FALSE(Contains(n->err(), "restarting workers"));
    CHECK(CountOccurrences(n->out(), "start round=0 code=78") == 2);
    CHECK_FALSE(Contains(n->out(), "round=1"));
  }
}
