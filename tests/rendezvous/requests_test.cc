#include "rendezvous/grpc/requests.h"

#include <catch2/catch.hpp>

#include "absl/strings/match.h"

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

TEST_CASE("requests: an exit barrier's wait is bounded by max_wait", "[rdzv]") {
  ServerLimits l;
  l.max_wait = absl::Seconds(5);
  v1::ReportFinishedRequest r;
  r.set_timeout_ms(5000);
  REQUIRE(BarrierTimeout(r, l).ok());
  CHECK(*BarrierTimeout(r, l) == absl::Seconds(5));
  r.set_timeout_ms(0);
  CHECK(*BarrierTimeout(r, l) == absl::ZeroDuration());
  for (int64_t ms : {int64_t{5001}, int64_t{-1}}) {
    r.set_timeout_ms(ms);
    auto t = BarrierTimeout(r, l);
    CHECK(t.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(t.status().message() ==
          "exit barrier timeout_ms=" + std::to_string(ms) + ": allowed: 0..5000 (max_wait)");
  }
}

TEST_CASE("requests: a replica group placement's groups, node counts, node id and run ids are bounded", "[rdzv]") {
  ServerLimits limits;
  limits.max_replica_groups = 8;
  limits.max_nodes = 100;
  limits.max_run_id_bytes = 16;
  v1::PlaceReplicaGroupRequest r;
  r.mutable_run()->set_run_id("job");
  r.set_node_id("a");
  r.set_replica_groups(8);
  r.set_min_nodes_per_group(1);
  r.set_max_nodes_per_group(100);
  CHECK(CheckPlaceReplicaGroup(r, limits).ok());
  auto refused = [&](auto change, const std::string& says) {
    v1::PlaceReplicaGroupRequest bad = r;
    change(bad);
    absl::Status s = CheckPlaceReplicaGroup(bad, limits);
    CHECK(absl::IsInvalidArgument(s));
    CHECK_THAT(std::string(s.message()), Catch::Contains(says));
  };
  refused([](auto& b) { b.set_replica_groups(0); }, "replica_groups=0: allowed: 1..8 (max_replica_groups)");
  refused([](auto& b) { b.set_replica_groups(9); }, "replica_groups=9");
  refused([](auto& b) { b.set_min_nodes_per_group(0); }, "nodes per replica group 0:100");
  refused([](auto& b) { b.set_min_nodes_per_group(5); b.set_max_nodes_per_group(4); }, "5:4");
  refused([](auto& b) { b.set_max_nodes_per_group(101); }, "<= 100 (max_nodes)");
  refused([](auto& b) { b.set_node_id(""); }, "empty node id");
  // "job-group-7" fits 16 bytes; "jobjob-group-7" too; "jobjobjob-group-7" does not.
  refused([](auto& b) { b.mutable_run()->set_run_id("jobjobjob"); }, "replica group run id of 17 bytes");
}

TEST_CASE("requests: a ReplicaGroupStates request's R and group run ids are bounded", "[requests]") {
  ServerLimits limits;
  limits.max_replica_groups = 8;
  limits.max_run_id_bytes = 16;
  v1::ReplicaGroupStatesRequest r;
  r.mutable_run()->set_run_id("job");
  r.set_replica_groups(8);
  CHECK(CheckReplicaGroupStates(r, limits).ok());
  r.set_replica_groups(0);
  CHECK_THAT(std::string(CheckReplicaGroupStates(r, limits).message()),
             Catch::Contains("replica_groups=0: allowed: 1..8 (max_replica_groups)"));
  r.set_replica_groups(9);
  CHECK(absl::IsInvalidArgument(CheckReplicaGroupStates(r, limits)));
  r.set_replica_groups(8);
  r.mutable_run()->set_run_id("jobjobjob");
  CHECK_THAT(std::string(CheckReplicaGroupStates(r, limits).message()),
             Catch::Contains("replica group run id of 17 bytes"));
}

TEST_CASE("requests: a watch's node id and a store batch's items are bounded", "[rdzv]") {
  ServerLimits l;
  l.max_node_id_bytes = 4;
  l.max_batch_items = 2;
  v1::WatchRequest w;
  w.set_node_id("abcd");
  CHECK(CheckWatch(w, l).ok());
  w.set_node_id("abcde");
  CHECK(CheckWatch(w, l).code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(CheckWatch(w, l).message(), "max_node_id_bytes"));
  v1::KvBatchRequest b;
  b.add_items();
  b.add_items();
  CHECK(CheckKvBatch(b, l).ok());
  b.add_items();
  CHECK(CheckKvBatch(b, l).code() == absl::StatusCode::kInvalidArgument);
  CHECK(CheckKvBatch(b, l).message() == "store batch of 3 requests: allowed: at most 2 (max_batch_items)");
}

}  // namespace
}  // namespace meshrun::rendezvous::requests
