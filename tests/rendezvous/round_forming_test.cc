// FormRound (rendezvous/run/round_forming.h): node ranks, global ranks,
// roles and the master address of a closed round.
#include <catch2/catch.hpp>

#include "rendezvous/run/round_forming.h"

using namespace meshrun::rendezvous;

namespace {
NodeDesc Node(std::string host, std::string addr, int nproc, std::string role = "default", int hint = -1) {
  NodeDesc d;
  d.hostname = host;
  d.node_id = host + "-id";
  d.addr = std::move(addr);
  d.nproc = nproc;
  d.role = std::move(role);
  d.node_rank_hint = hint;
  d.master_port = 29500 + nproc;
  return d;
}
}  // namespace

TEST_CASE("form round: ranks follow the node order, and the first node hosts the master", "[round_forming]") {
  std::vector<NodeDesc> nodes = {Node("b", "10.0.0.2", 4, "default", 1), Node("a", "10.0.0.1", 2, "default", 0),
                                 Node("c", "10.0.0.3", 8, "default", 2)};
  absl::StatusOr<FormedRound> f = FormRound(nodes, /*round=*/3, /*restart_count=*/1, /*max_restarts=*/5,
                                            /*max_world_size=*/1000, "job");
  REQUIRE(f.ok());
  CHECK(f->order == std::vector<int>{1, 0, 2});
  CHECK(f->world_size == 14);
  CHECK(f->warning.empty());
  REQUIRE(f->assignments.size() == 3);
  const std::vector<int> rank_base = {0, 2, 6};
  for (int r = 0; r < 3; ++r) {
    const Assignment& a = f->assignments[r];
    CHECK(a.node_rank == r);
    CHECK(a.round == 3);
    CHECK(a.node_count == 3);
    CHECK(a.world_size == 14);
    CHECK(a.rank_base == rank_base[r]);
    CHECK(a.master_addr == "10.0.0.1");
    CHECK(a.master_port == 29502);
    CHECK(a.restart_count == 1);
    CHECK(a.max_restarts == 5);
    CHECK(a.node_addr == nodes[f->order[r]].addr);
    CHECK(a.session.empty());
  }
}

TEST_CASE("form round: role ranks count within each role", "[round_forming]") {
  std::vector<NodeDesc> nodes = {Node("a", "10.0.0.1", 2, "trainer", 0), Node("b", "10.0.0.2", 3, "server", 1),
                                 Node("c", "10.0.0.3", 4, "trainer", 2)};
  absl::StatusOr<FormedRound> f = FormRound(nodes, 0, 0, 0, 1000, "job");
  REQUIRE(f.ok());
  CHECK(f->assignments[0].role_rank_base == 0);
  CHECK(f->assignments[0].role_world_size == 6);
  CHECK(f->assignments[1].role_rank_base == 0);
  CHECK(f->assignments[1].role_world_size == 3);
  CHECK(f->assignments[2].role_rank_base == 2);
  CHECK(f->assignments[2].role_world_size == 6);
}

TEST_CASE("form round: a world size past max_world_size is refused, naming both", "[round_forming]") {
  std::vector<NodeDesc> nodes = {Node("a", "10.0.0.1", 8), Node("b", "10.0.0.2", 8)};
  absl::StatusOr<FormedRound> f = FormRound(nodes, 2, 0, 0, /*max_world_size=*/15, "job");
  REQUIRE_FALSE(f.ok());
  CHECK(f.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(f.status().message()) ==
        "round 2 of run 'job' would have world size 16: allowed: 1..15 (max_world_size)");
  CHECK(FormRound(nodes, 2, 0, 0, 16, "job").ok());
}

TEST_CASE("form round: a loopback address on a multi-host job is decided from the others, or refused",
          "[round_forming]") {
  std::vector<NodeDesc> nodes = {Node("a", "10.0.0.1", 1), Node("b", "127.0.0.1", 1)};
  nodes[0].dialed_addr = "10.0.0.9";
  absl::StatusOr<FormedRound> f = FormRound(nodes, 0, 0, 0, 100, "job");
  REQUIRE(f.ok());
  CHECK(nodes[1].addr == "10.0.0.9");  // Written back.
  std::vector<NodeDesc> none = {Node("a", "10.0.0.1", 1), Node("b", "127.0.0.1", 1)};
  CHECK_FALSE(FormRound(none, 0, 0, 0, 100, "job").ok());
  std::vector<NodeDesc> empty;
  CHECK(FormRound(empty, 0, 0, 0, 100, "job").status().code() == absl::StatusCode::kInvalidArgument);
}
