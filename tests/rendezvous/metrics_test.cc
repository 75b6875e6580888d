#include <catch2/catch.hpp>

#include "rendezvous/metrics.h"
#include "rendezvous/rpc_metrics.h"

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
  CHECK(text.find("meshrun_rpcs_total{method=\"Join\",code=\"OK\"} 2\n") != std::string::npos);
  CHECK(text.find("meshrun_rpcs_total{method=\"KvGet\",code=\"DEADLINE_EXCEEDED\"} 1\n") != std::string::npos);
  // Buckets are cumulative: 0.003 falls in le=0.005, 2.0 in le=2.5.
  CHECK(text.find("meshrun_rpc_duration_seconds_bucket{method=\"Join\",le=\"0.0025\"} 0\n") != std::string::npos);
  CHECK(text.find("meshrun_rpc_duration_seconds_bucket{method=\"Join\",le=\"0.005\"} 1\n") != std::string::npos);
  CHECK(text.find("meshrun_rpc_duration_seconds_bucket{method=\"Join\",le=\"2.5\"} 2\n") != std::string::npos);
  CHECK(text.find("meshrun_rpc_duration_seconds_bucket{method=\"Join\",le=\"+Inf\"} 2\n") != std::string::npos);
  CHECK(text.find("meshrun_rpc_duration_seconds_count{method=\"Join\"} 2\n") != std::string::npos);
  CHECK(text.find("meshrun_failures_total{cause=\"signal\"} 1\n") != std::string::npos);
  CHECK(text.find("meshrun_failures_total{cause=\"exit_code\"} 0\n") != std::string::npos);
  CHECK(text.find("meshrun_runs{state=\"running\"} 1\n") != std::string::npos);
  CHECK(text.find("meshrun_run_round{run_id=\"a\\\"b\"} 3\n") != std::string::npos);  // Escaped quote.
  CHECK(text.find("meshrun_store_bytes{run_id=\"a\\\"b\"} 42\n") != std::string::npos);
  CHECK(text.find("meshrun_watchers_open 3\n") != std::string::npos);
}

TEST_CASE("rpc metric labels: method names and status code names", "[metrics]") {
  using meshrun::rendezvous::CodeName;
  using meshrun::rendezvous::MethodLabel;
  CHECK(MethodLabel("/meshrun.v1.Rendezvous/KvGet") == "KvGet");
  CHECK(MethodLabel("/grpc.health.v1.Health/Check") == "grpc.health.v1.Health/Check");
  CHECK(CodeName(0) == "OK");
  CHECK(CodeName(16) == "UNAUTHENTICATED");
  CHECK(CodeName(99) == "CODE_99");
}
