#include "rendezvous/requests.h"

#include <catch2/catch.hpp>

namespace meshrun::rendezvous::requests {
namespace {

v1::JoinRequest GoodJoin() {
  v1::JoinRequest r;
  r.mutable_run()->set_run_id("job");
  r.mutable_node()->set_node_id("a");
  r.mutable_node()->set_nproc(8);
  r.mutable_node()->set_addr("10.0.0.9");
  r.mutable_node()->set_master_port(29500);
  r.mutable_config()->set_min_nodes(1);
  r.mutable_config()->set_max_nodes(2);
  return r;
}

TEST_CASE("requests: the token and the run id are checked", "[rdzv]") {
  v1::RunRef run;
  run.set_run_id("job");
  CHECK(Admit("", run).ok());
  CHECK(Admit("secret", run).code() == absl::StatusCode::kUnauthenticated);
  run.set_token("secreT");
  CHECK(Admit("secret", run).code() == absl::StatusCode::kUnauthenticated);
  run.set_token("secret");
  CHECK(Admit("secret", run).ok());
  run.clear_run_id();
  CHECK(Admit("secret", run).code() == absl::StatusCode::kInvalidArgument);
  CHECK(Admit("secret", run, /*need_run_id=*/false).ok());
}

TEST_CASE("requests: a join is translated, the peer's address wins", "[rdzv]") {
  auto a = JoinFromProto(GoodJoin(), "10.0.0.1");
  REQUIRE(a.ok());
  CHECK(a->node.addr == "10.0.0.1");
  CHECK(a->node.role == "default");
  CHECK(a->config.max_nodes == 2);
  v1::JoinRequest r = GoodJoin();
  r.mutable_node()->set_local_addr("10.0.0.9");
  CHECK(JoinFromProto(r, "10.0.0.1")->node.addr == "10.0.0.9");
}

TEST_CASE("requests: bad joins and joins past the limits are refused naming them", "[rdzv]") {
  v1::JoinRequest r = GoodJoin();
  r.mutable_node()->set_nproc(0);
  CHECK(JoinFromProto(r, "").status().code() == absl::StatusCode::kInvalidArgument);
  // Found by fuzzing: nproc 2^31-1 on two nodes overflowed the world size.
  r.mutable_node()->set_nproc(2147483647);
  auto s = JoinFromProto(r, "").status();
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message() == "nproc=2147483647: allowed: 1..65536 (max_nproc)");
  r = GoodJoin();
  ServerLimits l;
  r.mutable_config()->set_max_nodes(static_cast<int>(l.max_nodes + 1));
  CHECK(JoinFromProto(r, "").status().message() == "max_nodes=1048577: allowed: 1..1048576 (max_nodes)");
  r.mutable_config()->set_max_nodes(static_cast<int>(l.max_nodes));
  r.mutable_node()->set_nproc(static_cast<int>(l.max_nproc));
  CHECK(JoinFromProto(r, "").ok());
}

}  // namespace
}  // namespace meshrun::rendezvous::requests
