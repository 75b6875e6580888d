// Jobs that share a host with another job's server: a second job forced
// onto the port of the first is told whose server it reached; a job on the
// host of a `meshrun server` daemon finds the daemon and says nothing.
#include <catch2/catch.hpp>

#include <signal.h>

#include "common/net.h"
#include "tests/e2e/e2e_util.h"

using namespace meshrun::testing;

TEST_CASE("two jobs forced onto one port: the second is told the port is the other job's, naming it",
          "[e2e][hosting]") {
  std::string dir = TempDir();
  const std::string endpoint = "--rdzv_endpoint=127.0.0.1:" + std::to_string(FreePort());
  // Job A hosts the server and waits for its second node.
  NodeProc a = StartNode(dir, "a", {"--nnodes=2", endpoint, "--rdzv_id=jobA", "/bin/true"},
                         {{"MESHRUN_TOKEN", "token-of-a"}, {"MESHRUN_LOG_LEVEL", "info"}});
  REQUIRE(WaitFor([&] { return Contains(a.err(), "hosting the rendezvous server on port"); }, 20));
  RunResult b = RunCommand({MeshrunBinary(), "--nnodes=2", endpoint, "--rdzv_id=jobB", "/bin/true"},
                           {{"MESHRUN_TOKEN", "token-of-b"}}, 30);
  INFO(b.err);
  CHECK(b.exit_code == 1);
  CHECK(CountLines(b.err, "meshrun: error:") == 1);
  CHECK(Contains(b.err, "wrong token"));
  CHECK(Contains(b.err, "run 'jobA')"));
  CHECK(Contains(b.err, "another job's server holds that port; give this job a port of its own"));
  kill(a.pid, SIGTERM);
  CHECK(WaitCommand(a.pid, 20) == 143);
}

TEST_CASE("a job on the host of a meshrun server daemon finds the daemon and says nothing of hosting",
          "[e2e][hosting][daemon]") {
  std::string dir = TempDir();
  Daemon d;
  StartDaemon(d, dir);
  RunResult r = RunCommand({MeshrunBinary(), "--nnodes=1", "--rdzv_endpoint=127.0.0.1:" + std::to_string(d.port),
                            "--rdzv_id=beside", "/bin/true"},
                           {}, 30);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
}

TEST_CASE("the daemon prints a usable metrics URL: the host name for an any-address host, loopback without a token",
          "[e2e][daemon][metrics]") {
  std::string dir = TempDir();
  struct Case {
    std::vector<std::string> flags;
    std::map<std::string, std::string> env;
    std::string url;
  };
  const std::vector<Case> cases = {
      // No token, no TLS: the metrics (they name every run) stay on loopback.
      {{"--host", "0.0.0.0", "--metrics_port", "0"}, {}, "http://127.0.0.1:"},
      {{"--host", "0.0.0.0", "--metrics_port", "0", "--metrics_host", "0.0.0.0"}, {}, "http://" + meshrun::Hostname() + ":"},
      {{"--host", "0.0.0.0", "--metrics_port", "0"}, {{"MESHRUN_TOKEN", "t0k"}}, "http://" + meshrun::Hostname() + ":"},
      {{"--metrics_port", "0"}, {}, "http://127.0.0.1:"}};
  for (const Case& c : cases) {
    Daemon d;
    StartDaemon(d, dir, c.env, c.flags);
    REQUIRE(WaitFor([&] { return Contains(ReadFile(dir + "/server.out"), "/metrics"); }, 10));
    const std::string out = ReadFile(dir + "/server.out");
    INFO(out);
    CHECK(Contains(out, "meshrun server: metrics on " + c.url));
    CHECK_FALSE(Contains(out, "http://::"));
  }
}
