#include <catch2/catch.hpp>

#include "rendezvous/run/node_order.h"

using namespace meshrun::rendezvous;

namespace {
NodeDesc Node(std::string host, std::string addr, int64_t pid, int hint = -1, bool endpoint_host = false) {
  NodeDesc d;
  d.hostname = host;
  d.addr = addr;
  d.pid = pid;
  d.node_id = host + std::to_string(pid);
  d.node_rank_hint = hint;
  d.is_endpoint_host = endpoint_host;
  return d;
}
}  // namespace

TEST_CASE("endpoint host first, then by address", "[order]") {
  auto o = OrderNodes({Node("b", "10.0.0.2", 1), Node("c", "10.0.0.3", 1), Node("a", "10.0.0.9", 1, -1, true)});
  CHECK(o.order == std::vector<int>{2, 0, 1});
  CHECK(o.warning.empty());
}

TEST_CASE("node_rank is honoured when exactly 0..n-1", "[order]") {
  auto o = OrderNodes({Node("a", "1", 1, 1), Node("b", "2", 1, 0)});
  CHECK(o.order == std::vector<int>{1, 0});
  auto dup = OrderNodes({Node("a", "1", 1, 0), Node("b", "2", 1, 0)});
  CHECK(dup.order == std::vector<int>{0, 1});
  CHECK(dup.warning.find("asked for by two nodes") != std::string::npos);
  CHECK(dup.warning.find("a (pid 1)") != std::string::npos);
  CHECK(dup.warning.find("b (pid 1)") != std::string::npos);
}
