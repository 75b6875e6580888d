// Jobs that share a host with another job's server: a second job forced
// onto the port of the first is told whose server it reached; a job on the
// host of a `meshrun server` daemon finds the daemon and says nothing.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/net.h"
#include "tests/e2e/e2e_util.h"
#include "tests/support/skip.h"

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

namespace {

// Whether this namespace has IPv6 loopback (::1 can be bound).
bool HasIpv6Loopback() {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

}  // namespace

TEST_CASE("a job on [::1]:P runs while another hosts 127.0.0.1:P, as under torchrun: each hosts its own server",
          "[e2e][hosting]") {
  if (!HasIpv6Loopback()) MESHRUN_SKIP("no IPv6 loopback (::1) in this network namespace");
  std::string dir = TempDir();
  const std::string port = std::to_string(FreePort());
  // Job A hosts 127.0.0.1:P and waits for its second node.
  NodeProc a = StartNode(dir, "a", {"--nnodes=2", "--rdzv_endpoint=127.0.0.1:" + port, "--rdzv_id=jobA", "/bin/true"},
                         {{"MESHRUN_LOG_LEVEL", "info"}});
  REQUIRE(WaitFor([&] { return Contains(a.err(), "hosting the rendezvous server on port"); }, 20));
  RunResult b = RunCommand({MeshrunBinary(), "--nnodes=1", "--rdzv_endpoint=[::1]:" + port, "--rdzv_id=jobB",
                            "/bin/echo", "job-b-ran"},
                           {{"MESHRUN_LOG_LEVEL", "info"}}, 30);
  INFO(b.err);
  CHECK(b.exit_code == 0);
  CHECK(Contains(b.out, "job-b-ran"));
  CHECK(Contains(b.err, "hosting the rendezvous server on port " + port));
  // A second node of job A on the same address still joins A's server.
  RunResult a2 = RunCommand({MeshrunBinary(), "--nnodes=2", "--rdzv_endpoint=127.0.0.1:" + port, "--rdzv_id=jobA",
                             "/bin/true"},
                            {{"MESHRUN_LOG_LEVEL", "info"}}, 30);
  INFO(a2.err);
  CHECK(a2.exit_code == 0);
  CHECK(Contains(a2.err, "already hosts port " + port + " on 127.0.0.1; joining it as a client"));
  CHECK(WaitCommand(a.pid, 20) == 0);
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

TEST_CASE("many jobs one after the other beside a meshrun server daemon all run: none waits on the host claim",
          "[e2e][hosting][daemon]") {
  // Each job finds the daemon's claim on its port. When that took a
  // connection to the claim's socket (which nobody accepts), the sixth job
  // on a host blocked in connect() for good (an attack found it).
  std::string dir = TempDir();
  Daemon d;
  StartDaemon(d, dir);
  for (int i = 0; i < 12; ++i) {
    RunResult r = RunCommand({MeshrunBinary(), "--nnodes=1", "--rdzv_endpoint=127.0.0.1:" + std::to_string(d.port),
                              "--rdzv_id=after" + std::to_string(i), "/bin/true"},
                             {}, 30);
    INFO("job " << i << ": " << r.err);
    REQUIRE(r.exit_code == 0);
  }
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
