// The plaintext health port: probes that speak no TLS (Kubernetes' gRPC
// probes) reach a TLS or mutual-TLS server's health, and every meshrun
// with rdzv_conf health_port answers for itself and the server it hosts.
#include <catch2/catch.hpp>

#include <signal.h>

#include <regex>

#include "tests/e2e/e2e_util.h"
#include "tests/support/certs.h"
#include "tests/support/grpc_health.h"

using namespace meshrun::testing;

TEST_CASE("a mutual-TLS daemon answers plaintext health checks on its health port only", "[e2e][daemon][health]") {
  TestCerts certs;
  REQUIRE(certs.ok());
  std::string dir = TempDir();
  Daemon d;
  StartDaemon(d, dir, {},
              {"--tls_cert", certs.Path("host.crt"), "--tls_key", certs.Path("host.key"), "--tls_ca",
               certs.Path("ca.crt"), "--health_port", "0"});
  std::smatch m;
  std::string out;
  REQUIRE(WaitFor([&] {
    out = ReadFile(dir + "/server.out");
    return std::regex_search(out, m, std::regex("gRPC health checks, plaintext, on 127\\.0\\.0\\.1:([0-9]+)"));
  }, 10));
  const std::string health = "127.0.0.1:" + m[1].str();
  HealthAnswer h = CheckHealth(health, "");
  CHECK(h.code == grpc::StatusCode::OK);
  CHECK(h.status == 1);  // SERVING
  CHECK(CheckHealth(health, "meshrun.v1.Rendezvous").status == 1);
  // The rendezvous port itself speaks only mutual TLS: a plaintext probe gets nothing there.
  CHECK(CheckHealth("127.0.0.1:" + std::to_string(d.port), "", 2).code != grpc::StatusCode::OK);
  kill(d.pid, SIGTERM);
  CHECK(WaitCommand(d.pid, 10) == 0);
  d.pid = -1;
  CHECK(CheckHealth(health, "", 1).code == grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE("every meshrun with rdzv_conf health_port answers for itself, the hosting one for its server too",
          "[e2e][health]") {
  std::string dir = TempDir();
  const int port = FreePort(), health_a = FreePort(), health_b = FreePort();
  std::string go = dir + "/go";
  std::string script = WriteScript(dir, "w.sh", "echo ready\nwhile [ ! -e " + go + " ]; do sleep 0.05; done");
  auto node = [&](const std::string& name, int health) {
    return StartNode(dir, name,
                     {"--nnodes=2", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port), "--rdzv_id=probed",
                      "--rdzv_conf=health_port=" + std::to_string(health), script});
  };
  NodeProc a = node("a", health_a);
  REQUIRE(WaitFor([&] { return CheckHealth("127.0.0.1:" + std::to_string(port), "", 1).status == 1; }, 20));
  NodeProc b = node("b", health_b);
  REQUIRE(WaitFor([&] { return CountOccurrences(a.out() + b.out(), "ready") == 2; }, 30));
  INFO(a.err() << b.err());
  const std::string ha = "127.0.0.1:" + std::to_string(health_a), hb = "127.0.0.1:" + std::to_string(health_b);
  CHECK(CheckHealth(ha, "").status == 1);
  CHECK(CheckHealth(hb, "").status == 1);
  CHECK(CheckHealth(ha, "meshrun.v1.Rendezvous").status == 1);  // Node a hosts the server.
  CHECK(CheckHealth(hb, "meshrun.v1.Rendezvous").code == grpc::StatusCode::NOT_FOUND);  // Node b does not.
  std::ofstream(go) << "1";
  CHECK(WaitCommand(a.pid, 30) == 0);
  CHECK(WaitCommand(b.pid, 30) == 0);
}
