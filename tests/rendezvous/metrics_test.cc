#include <catch2/catch.hpp>

#include <prometheus/text_serializer.h>

#include "rendezvous/server/metrics.h"
#include "rendezvous/server/metrics_exposer.h"
#include "rendezvous/server.h"
#include "rendezvous/state/serving_gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include "rendezvous/grpc/call_interceptor.h"

using meshrun::rendezvous::RunStatus;

TEST_CASE("server metrics render in Prometheus' text format", "[metrics]") {
  meshrun::rendezvous::ServerMetrics m;
  m.RecordRpc("Join", "OK", 0.003);
  m.RecordRpc("Join", "OK", 2.0);
  m.RecordRpc("KvGet", "DEADLINE_EXCEEDED", 0.0001);
  m.RecordFailure("signal");
  RunStatus r;
  r.run_id = "a\"b";
  r.state = "running";
  r.round = 2;
  r.restart_count = 1;
  r.kv_bytes = 42;
  std::string text = m.Render({r}, 3);
  INFO(text);
  CHECK(text.find("# TYPE meshrun_rpcs_total counter\n") != std::string::npos);
  CHECK(text.find("meshrun_rpcs_total{code=\"OK\",method=\"Join\"} 2\n") != std::string::npos);
  CHECK(text.find("meshrun_rpcs_total{code=\"DEADLINE_EXCEEDED\",method=\"KvGet\"} 1\n") != std::string::npos);
  // Buckets are cumulative: 0.003 falls in le=0.005, 2.0 in le=2.5.
  CHECK(text.find("meshrun_rpc_duration_seconds_bucket{method=\"Join\",le=\"0.0025\"} 0\n") != std::string::npos);
  CHECK(text.find("meshrun_rpc_duration_seconds_bucket{method=\"Join\",le=\"0.005\"} 1\n") != std::string::npos);
  CHECK(text.find("meshrun_rpc_duration_seconds_bucket{method=\"Join\",le=\"2.5\"} 2\n") != std::string::npos);
  CHECK(text.find("meshrun_rpc_duration_seconds_bucket{method=\"Join\",le=\"+Inf\"} 2\n") != std::string::npos);
  CHECK(text.find("meshrun_rpc_duration_seconds_count{method=\"Join\"} 2\n") != std::string::npos);
  CHECK(text.find("meshrun_failures_total{cause=\"signal\"} 1\n") != std::string::npos);
  CHECK(text.find("meshrun_failures_total{cause=\"exit_code\"} 0\n") != std::string::npos);
  CHECK(text.find("meshrun_runs{state=\"running\"} 1\n") != std::string::npos);
  // The round as meshrun status shows it; an escaped quote in the run id.
  CHECK(text.find("meshrun_run_round{run_id=\"a\\\"b\"} 2\n") != std::string::npos);
  CHECK(text.find("meshrun_store_bytes{run_id=\"a\\\"b\"} 42\n") != std::string::npos);
  CHECK(text.find("meshrun_watchers_open 3\n") != std::string::npos);
}

TEST_CASE("a replica's scrape says whether it leads, a single server's has no such gauge", "[metrics]") {
  meshrun::rendezvous::ServerMetrics single;
  single.SetSource({[] { return std::vector<RunStatus>{}; }, [] { return 0; }, {}, {}, {}, {}});
  std::string text = prometheus::TextSerializer().Serialize(single.Collect());
  CHECK(text.find("meshrun_replica_leader") == std::string::npos);
  int leads = 1;
  meshrun::rendezvous::ServerMetrics replica;
  replica.SetSource({[] { return std::vector<RunStatus>{}; }, [] { return 0; }, {}, [&leads] { return leads; }, {}, {}});
  text = prometheus::TextSerializer().Serialize(replica.Collect());
  INFO(text);
  CHECK(text.find("# TYPE meshrun_replica_leader gauge\nmeshrun_replica_leader 1\n") != std::string::npos);
  leads = 0;  // Read at every scrape.
  text = prometheus::TextSerializer().Serialize(replica.Collect());
  CHECK(text.find("meshrun_replica_leader 0\n") != std::string::npos);
}

TEST_CASE("a replica's etcd calls are counted by kind and outcome, with their durations", "[metrics]") {
  meshrun::rendezvous::ServerMetrics m;
  m.RecordStateCall("Txn", "OK", 0.0015);
  m.RecordStateCall("Txn", "OK", 0.0030);
  m.RecordStateCall("Range", "UNAVAILABLE", 3.0);
  const std::string text = prometheus::TextSerializer().Serialize(m.Collect());
  INFO(text);
  CHECK(text.find("meshrun_etcd_requests_total{code=\"OK\",op=\"Txn\"} 2\n") != std::string::npos);
  CHECK(text.find("meshrun_etcd_requests_total{code=\"UNAVAILABLE\",op=\"Range\"} 1\n") != std::string::npos);
  CHECK(text.find("meshrun_etcd_request_duration_seconds_count{op=\"Txn\"} 2\n") != std::string::npos);
  // 1.5 ms and 3 ms: one in the 2.5 ms bucket, both in the 5 ms one.
  CHECK(text.find("meshrun_etcd_request_duration_seconds_bucket{op=\"Txn\",le=\"0.0025\"} 1\n") != std::string::npos);
  CHECK(text.find("meshrun_etcd_request_duration_seconds_bucket{op=\"Txn\",le=\"0.005\"} 2\n") != std::string::npos);
}

TEST_CASE("a replica's scrape counts its leads and says since when it leads", "[metrics]") {
  meshrun::rendezvous::state::ServingGate gate;
  meshrun::rendezvous::ServerMetrics replica;
  meshrun::rendezvous::ServerMetrics::Source source{[] { return std::vector<RunStatus>{}; }, [] { return 0; }, {}, {}, {}, {}};
  source.replica_leads = [&gate] { return gate.leads(); };
  source.replica_leading_since = [&gate] { return gate.leading_since(); };
  replica.SetSource(std::move(source));
  auto scrape = [&] { return prometheus::TextSerializer().Serialize(replica.Collect()); };
  std::string text = scrape();
  INFO(text);
  CHECK(text.find("# TYPE meshrun_replica_leads_total counter\nmeshrun_replica_leads_total 0\n") != std::string::npos);
  CHECK(text.find("meshrun_replica_leading_since_seconds 0\n") != std::string::npos);
  // Leads from 1,700,000,000 s; still the same lead when told again (a pause ended).
  gate.SetLeadingSince(absl::FromUnixSeconds(1'700'000'000));
  gate.SetLeadingSince(absl::FromUnixSeconds(1'700'000'000));
  text = scrape();
  CHECK(text.find("meshrun_replica_leads_total 1\n") != std::string::npos);
  CHECK(text.find("meshrun_replica_leading_since_seconds 1700000000\n") != std::string::npos);
  // Lost the lead, then won it again: two leads, the second's start.
  gate.SetLeadingSince(absl::InfinitePast());
  CHECK(scrape().find("meshrun_replica_leading_since_seconds 0\n") != std::string::npos);
  gate.SetLeadingSince(absl::FromUnixSeconds(1'700'000'100));
  text = scrape();
  CHECK(text.find("meshrun_replica_leads_total 2\n") != std::string::npos);
  CHECK(text.find("meshrun_replica_leading_since_seconds 1700000100\n") != std::string::npos);
}

TEST_CASE("rpc metric labels: method names and status code names", "[metrics]") {
  using meshrun::rendezvous::CodeName;
  using meshrun::rendezvous::MethodLabel;
  CHECK(MethodLabel("/meshrun.v1.Rendezvous/Join") == "Join");
  CHECK(MethodLabel("/meshrun.v1.Store/KvGet") == "KvGet");
  CHECK(MethodLabel("/meshrun.v1.Admin/Status") == "Status");
  CHECK(MethodLabel("/grpc.health.v1.Health/Check") == "grpc.health.v1.Health/Check");
  CHECK(CodeName(0) == "OK");
  CHECK(CodeName(16) == "UNAUTHENTICATED");
  CHECK(CodeName(99) == "CODE_99");
}

TEST_CASE("metrics listen address: IPv4 only, 'all' maps to 0.0.0.0", "[metrics]") {
  using meshrun::rendezvous::MetricsListenAddress;
  CHECK(*MetricsListenAddress("::", 9400) == "0.0.0.0:9400");
  CHECK(*MetricsListenAddress("", 0) == "0.0.0.0:0");
  CHECK(*MetricsListenAddress("10.1.2.3", 9400) == "10.1.2.3:9400");
  auto v6 = MetricsListenAddress("fd00::1", 9400);
  REQUIRE(!v6.ok());
  CHECK(v6.status().message().find("'fd00::1'") != std::string::npos);
  CHECK(!MetricsListenAddress("host0", 9400).ok());
  CHECK(!MetricsListenAddress("127.0.0.1", 70000).ok());
}

TEST_CASE("metrics endpoint: serves a scrape, refuses a port in use", "[metrics]") {
  using meshrun::rendezvous::MetricsEndpoint;
  auto metrics = std::make_shared<meshrun::rendezvous::ServerMetrics>();
  metrics->RecordRpc("Join", "OK", 0.001);
  MetricsEndpoint::Options o;
  o.host = "127.0.0.1";
  auto first = MetricsEndpoint::Start(o, metrics);
  REQUIRE(first.ok());
  const int port = (*first)->port();
  REQUIRE(port > 0);
  CHECK((*first)->serving());
  o.port = port;
  auto second = MetricsEndpoint::Start(o, metrics);
  REQUIRE(!second.ok());
  CHECK(second.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(second.status().message().find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
}

namespace {

// One HTTP GET of /metrics on 127.0.0.1:`port` with an optional
// Authorization header; the status line and body.
std::string Scrape(int port, const std::string& authorization) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return "";
  }
  std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  if (!authorization.empty()) req += "Authorization: " + authorization + "\r\n";
  req += "\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace

TEST_CASE("metrics endpoint: a server's token is required as a bearer token", "[metrics]") {
  using meshrun::rendezvous::MetricsEndpoint;
  auto metrics = std::make_shared<meshrun::rendezvous::ServerMetrics>();
  metrics->RecordRpc("Join", "OK", 0.001);
  MetricsEndpoint::Options o;
  o.host = "127.0.0.1";
  o.token = "s3cret";
  auto e = MetricsEndpoint::Start(o, metrics);
  REQUIRE(e.ok());
  const int port = (*e)->port();
  for (const std::string& auth : {std::string(), std::string("Bearer wrong"), std::string("Basic czNjcmV0")}) {
    const std::string r = Scrape(port, auth);
    INFO(auth << ": " << r);
    CHECK(r.rfind("HTTP/1.1 401", 0) == 0);
    CHECK(r.find("WWW-Authenticate: Bearer") != std::string::npos);
    CHECK(r.find("meshrun_") == std::string::npos);
  }
  const std::string ok = Scrape(port, "Bearer s3cret");
  CHECK(ok.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(ok.find("meshrun_rpcs_total") != std::string::npos);
}

TEST_CASE("a TLS server without a token keeps its metrics on loopback", "[metrics]") {
  using meshrun::rendezvous::ServerOptions;
  ServerOptions o;
  o.host = "0.0.0.0";
  CHECK(meshrun::rendezvous::MetricsHost(o) == "127.0.0.1");  // No token: loopback.
  o.token = "t";
  CHECK(meshrun::rendezvous::MetricsHost(o) == "0.0.0.0");
  o.token.clear();
  o.tls.cert_pem = "x";  // A TLS server.
  o.metrics_host = "0.0.0.0";
  absl::Status s = meshrun::rendezvous::CheckMetricsExposure(o);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(s.message()).find("give the server a token") != std::string::npos);
  o.metrics_host.clear();
  CHECK(meshrun::rendezvous::CheckMetricsExposure(o).ok());
}
