// Prometheus metrics of the rendezvous server, scraped over a plain socket
// while real jobs run: a `meshrun server --metrics_port` daemon through a
// restart, and an embedded server with --rdzv_conf metrics_port=.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include "absl/time/clock.h"
#include "tests/e2e/e2e_util.h"
#include "tests/support/grpc_health.h"

using namespace meshrun::testing;

namespace {

// GET http://127.0.0.1:<port><path>: the whole response, "" when nothing answers.
std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

// The value of the sample line `name` (with its labels) in `text`, or -1.
double Sample(const std::string& text, const std::string& name) {
  size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

}  // namespace

TEST_CASE("metrics of a server daemon move through a job with a restart", "[e2e][metrics]") {
  std::string dir = TempDir();
  int metrics = FreePort();
  std::string port_file = dir + "/port";
  pid_t daemon = StartCommand({MeshrunBinary(), "server", "--host", "127.0.0.1", "--port", "0", "--port_file",
                               port_file, "--metrics_port", std::to_string(metrics)},
                              {}, dir + "/server.out", dir + "/server.err");
  REQUIRE(WaitFor([&] { return !ReadFile(port_file).empty(); }, 10));
  const int port = std::stoi(ReadFile(port_file));

  std::string before = HttpGet(metrics, "/metrics");
  INFO(before);
  REQUIRE(Contains(before, "HTTP/1.1 200 OK\r\n"));
  CHECK(Contains(before, "Content-Type: text/plain"));  // prometheus-cpp: the text format, version 0.0.4
  CHECK(Sample(before, "meshrun_runs{state=\"running\"}") == 0);
  CHECK(Sample(before, "meshrun_failures_total{cause=\"exit_code\"}") == 0);
  CHECK(Sample(before, "meshrun_watchers_open") == 0);
  CHECK(Contains(HttpGet(metrics, "/other"), "HTTP/1.1 404 Not Found"));
  HealthAnswer health = CheckHealth("127.0.0.1:" + std::to_string(port), "");
  CHECK(health.status == 1);

  // Round 0 fails; round 1 sets a store key and waits for the go file.
  std::string go = dir + "/go";
  std::string script = WriteScript(dir, "w.sh",
      "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && exit 3\n"
      "echo ready\nwhile [ ! -e " + go + " ]; do sleep 0.05; done");
  NodeProc job = StartNode(dir, "job", {"--nnodes=1", "--nproc_per_node=2", "--rdzv_endpoint=127.0.0.1:" +
                                        std::to_string(port), "--rdzv_id=mx", "--max_restarts=1", script});
  REQUIRE(WaitFor([&] { return CountOccurrences(job.out(), "ready") == 2; }, 20));
  std::string during = HttpGet(metrics, "/metrics");
  INFO(during);
  CHECK(Sample(during, "meshrun_runs{state=\"running\"}") == 1);
  CHECK(Sample(during, "meshrun_run_restarts{run_id=\"mx\"}") == 1);
  CHECK(Sample(during, "meshrun_run_restarts_budget{run_id=\"mx\"}") == 1);
  // The round agrees with meshrun status's (round 1 after one restart).
  CHECK(Sample(during, "meshrun_run_round{run_id=\"mx\"}") == 1);
  RunResult st = RunCommand({MeshrunBinary(), "status", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                             "--rdzv_id=mx", "--json"},
                            {}, 20);
  INFO(st.out << st.err);
  CHECK(Contains(st.out, "\"round\":1,"));
  CHECK_FALSE(Contains(during, "meshrun_replica_leader"));  // A single server.
  CHECK(Sample(during, "meshrun_run_nodes{run_id=\"mx\"}") == 1);
  CHECK(Sample(during, "meshrun_run_world_size{run_id=\"mx\"}") == 2);
  CHECK(Sample(during, "meshrun_failures_total{cause=\"exit_code\"}") == 1);
  CHECK(Sample(during, "meshrun_watchers_open") == 1);
  CHECK(Sample(during, "meshrun_rpcs_total{code=\"OK\",method=\"Join\"}") == 2);
  CHECK(Sample(during, "meshrun_rpcs_total{code=\"OK\",method=\"ReportFailure\"}") == 1);
  CHECK(Sample(during, "meshrun_rpc_duration_seconds_count{method=\"Join\"}") == 2);
  CHECK(Sample(during, "meshrun_rpc_duration_seconds_bucket{method=\"Join\",le=\"+Inf\"}") == 2);
  CHECK(Sample(during, "meshrun_store_keys{run_id=\"mx\"}") >= 0);
  CHECK(Sample(during, "meshrun_store_bytes{run_id=\"mx\"}") >= 0);

  std::ofstream(go) << "1";
  CHECK(WaitCommand(job.pid, 30) == 0);
  std::string after = HttpGet(metrics, "/metrics");
  CHECK(Sample(after, "meshrun_runs{state=\"finished\"}") == 1);
  CHECK(Sample(after, "meshrun_runs{state=\"running\"}") == 0);
  CHECK(Sample(after, "meshrun_rpcs_total{code=\"OK\",method=\"ReportFinished\"}") == 1);
  kill(daemon, SIGTERM);
  CHECK(WaitCommand(daemon, 10) == 0);
}

TEST_CASE("an embedded server serves metrics with rdzv_conf metrics_port", "[e2e][metrics]") {
  std::string dir = TempDir();
  int metrics = FreePort();
  std::string go = dir + "/go";
  std::string script = WriteScript(dir, "w.sh", "echo ready\nwhile [ ! -e " + go + " ]; do sleep 0.05; done");
  NodeProc n = StartNode(dir, "n", {"--standalone", "--nproc_per_node=2",
                                    "--rdzv_conf=metrics_port=" + std::to_string(metrics), script});
  REQUIRE(WaitFor([&] { return CountOccurrences(n.out(), "ready") == 2; }, 20));
  INFO(n.err());
  CHECK(Contains(n.err(), "meshrun: metrics on http://127.0.0.1:" + std::to_string(metrics) + "/metrics"));
  std::string text = HttpGet(metrics, "/metrics");
  INFO(text);
  CHECK(Sample(text, "meshrun_runs{state=\"running\"}") == 1);
  CHECK(Sample(text, "meshrun_rpcs_total{code=\"OK\",method=\"Join\"}") == 1);
  std::ofstream(go) << "1";
  CHECK(WaitCommand(n.pid, 20) == 0);

  RunResult bad = RunCommand({MeshrunBinary(), "--rdzv_conf=metrics_port=70000", "/bin/true"}, {}, 10);
  CHECK(bad.exit_code == 2);
  CHECK(Contains(bad.err, "metrics_port=70000: must be a TCP port 0..65535"));
}
