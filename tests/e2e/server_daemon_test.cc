// `meshrun server` as a daemon shared by two jobs with different run ids.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <regex>
#include <thread>
#include <tuple>

#include "tests/e2e/e2e_util.h"
#include "tests/support/grpc_health.h"

using namespace meshrun::testing;


TEST_CASE("two run ids on one server daemon are separate worlds", "[e2e][daemon]") {
  std::string dir = TempDir();
  Daemon d;
  StartDaemon(d, dir);
  std::string endpoint = "--rdzv_endpoint=127.0.0.1:" + std::to_string(d.port);
  std::string ok = WriteScript(dir, "ok.sh", "echo \"J $TORCHELASTIC_RUN_ID $WORLD_SIZE $RANK\"; sleep 0.5");
  std::string bad = WriteScript(dir, "bad.sh", "[ \"$RANK\" = 1 ] && exit 7\nexec sleep 30");
  RunResult a, b;
  std::thread ta([&] {
    a = RunCommand({MeshrunBinary(), "--nnodes=1", endpoint, "--rdzv_id=jobA", "--nproc_per_node=2", bad}, {}, 60);
  });
  std::thread tb([&] {
    b = RunCommand({MeshrunBinary(), "--nnodes=1", endpoint, "--rdzv_id=jobB", "--nproc_per_node=3", ok}, {}, 60);
  });
  ta.join();
  tb.join();
  INFO(a.err << b.err);
  CHECK(a.exit_code == 7);
  CHECK(b.exit_code == 0);
  CHECK(CountLines(b.out, "J jobB 3 ") == 3);
  // The ended runs, their agents gone (each keeps only what status shows),
  // still show their node.
  for (const auto& [id, state, world] : {std::tuple{"jobA", "failed", 2}, std::tuple{"jobB", "finished", 3}}) {
    RunResult st = RunCommand({MeshrunBinary(), "status", endpoint, std::string("--rdzv_id=") + id}, {}, 20);
    INFO(st.out << st.err);
    CHECK(st.exit_code == 0);
    CHECK(Contains(st.out, std::string(": ") + state + ", round 0"));
    CHECK(Contains(st.out, "world size " + std::to_string(world)));
    CHECK(CountLines(st.out, std::string(" ") + state + " ") == 1);
    CHECK(CountLines(st.out, "127.0.0.1 ") == 1);
  }
  // The failed run id starts afresh.
  RunResult again = RunCommand({MeshrunBinary(), "--nnodes=1", endpoint, "--rdzv_id=jobA",
                                "--nproc_per_node=2", "--rdzv_conf=is_host=0", ok}, {}, 60);
  INFO(again.err);
  CHECK(again.exit_code == 0);
  CHECK(CountLines(again.out, "J jobA 2 ") == 2);
}

TEST_CASE("an agent with the wrong token gets no assignment from the daemon", "[e2e][daemon][auth]") {
  std::string dir = TempDir();
  Daemon d;
  StartDaemon(d, dir, {{"MESHRUN_TOKEN", "right"}});
  std::string endpoint = "--rdzv_endpoint=127.0.0.1:" + std::to_string(d.port);
  std::string script = WriteScript(dir, "ran.sh", "echo RAN");
  RunResult bad = RunCommand({MeshrunBinary(), "--nnodes=1", endpoint, "--rdzv_id=j", "--rdzv_conf=is_host=0", script},
                             {{"MESHRUN_TOKEN", "wrong"}}, 30);
  CHECK(bad.exit_code == 1);
  CHECK_FALSE(Contains(bad.out, "RAN"));
  CHECK(Contains(bad.err, "token"));
  CHECK_FALSE(Contains(bad.err, "lost the rendezvous server"));
  RunResult good = RunCommand({MeshrunBinary(), "--nnodes=1", endpoint, "--rdzv_id=j", "--rdzv_conf=is_host=0", script},
                              {{"MESHRUN_TOKEN", "right"}}, 30);
  CHECK(good.exit_code == 0);
  CHECK(Contains(good.out, "RAN"));
}

TEST_CASE("the daemon refuses a port file it cannot write and a negative grace", "[e2e][daemon]") {
  RunResult r = RunCommand({MeshrunBinary(), "server", "--host", "127.0.0.1", "--port", "0", "--port_file",
                            "/nonexistent-dir/port"}, {}, 20);
  CHECK(r.exit_code == 1);
  CHECK(Contains(r.err, "cannot write --port_file=/nonexistent-dir/port"));
  RunResult g = RunCommand({MeshrunBinary(), "server", "--port", "0", "--shutdown_grace=-1"}, {}, 20);
  CHECK(g.exit_code == 2);
}

TEST_CASE("is_host=0 on an endpoint nobody serves fails as unreachable", "[e2e]") {
  RunResult r = RunCommand({MeshrunBinary(), "--nnodes=1", "--rdzv_endpoint=127.0.0.1:1", "--rdzv_id=x",
                            "--rdzv_conf=is_host=0,read_timeout=2", "/bin/true"}, {}, 30);
  CHECK(r.exit_code == 1);
  CHECK(Contains(r.err, "unreachable"));
  CHECK(r.seconds < 10);
}

TEST_CASE("the daemon's port answers a gRPC health client: SERVING, token or not", "[e2e][daemon][health]") {
  std::string dir = TempDir();
  Daemon d;
  StartDaemon(d, dir, {{"MESHRUN_TOKEN", "t0k"}});
  std::string target = "127.0.0.1:" + std::to_string(d.port);
  HealthAnswer h = CheckHealth(target, "");
  CHECK(h.code == grpc::StatusCode::OK);
  CHECK(h.status == 1);
  CHECK(CheckHealth(target, "meshrun.v1.Rendezvous").status == 1);
  kill(d.pid, SIGTERM);
  CHECK(WaitCommand(d.pid, 10) == 0);
  d.pid = -1;
  CHECK(CheckHealth(target, "", 1).code == grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE("a frozen server daemon (SIGSTOP) is noticed by its agents within 8 s, the message giving the real time",
          "[e2e][daemon]") {
  std::string dir = TempDir();
  Daemon d;
  StartDaemon(d, dir);
  const std::string endpoint = "--rdzv_endpoint=127.0.0.1:" + std::to_string(d.port);
  std::string script = WriteScript(dir, "w.sh", "echo ready\nexec sleep 120");
  std::vector<NodeProc> nodes;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(StartNode(dir, "n" + std::to_string(i),
                              {"--nnodes=2", endpoint, "--rdzv_id=frozen", "--rdzv_conf=is_host=0", script}));
  }
  REQUIRE(WaitFor([&] { return CountOccurrences(nodes[0].out() + nodes[1].out(), "ready") == 2; }, 30));
  REQUIRE(kill(d.pid, SIGSTOP) == 0);
  const absl::Time stopped = absl::Now();
  for (NodeProc& n : nodes) {
    const int code = WaitCommand(n.pid, 40);
    const absl::Duration took = absl::Now() - stopped;
    INFO(n.err());
    CHECK(code == 1);
    std::smatch m;
    const std::string err = n.err();
    REQUIRE(std::regex_search(err, m, std::regex("lost the rendezvous server at 127\\.0\\.0\\.1:[0-9]+: no answer "
                                                 "for ([0-9.]+)(ms|s) \\([0-9]+ heartbeats? unanswered; limit 8s")));
    const double said = std::stod(m[1].str()) * (m[2].str() == "ms" ? 0.001 : 1);
    CHECK(said >= 8.0);   // The real time without an answer, at least the limit ...
    CHECK(said < 8.5);    // ... and measured when noticed.
    if (kTimingBounds) CHECK(took < absl::Seconds(9));  // Noticed within 8 s; workers stopped at once.
  }
  kill(d.pid, SIGCONT);
}
