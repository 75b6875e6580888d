// RunSummary (rendezvous/run/run_summary.h): what an ended run keeps of its
// nodes for Status.
#include <catch2/catch.hpp>

#include "rendezvous/run/run_summary.h"

using namespace meshrun::rendezvous;

namespace {
NodeDesc Node(std::string id, std::string host, std::string addr, int nproc) {
  NodeDesc d;
  d.node_id = std::move(id);
  d.hostname = std::move(host);
  d.addr = std::move(addr);
  d.nproc = nproc;
  return d;
}
}  // namespace

TEST_CASE("run summary: the ended nodes, by node rank, with their state and keep-alive age", "[run_summary]") {
  RunSummary sum;
  const NodeDesc a = Node("id-a", "host-a", "10.0.0.1", 4);
  const NodeDesc b = Node("id-b", "host-bb", "10.0.0.22", 8);
  const NodeDesc c = Node("", "", "", 1);  // Empty texts stay empty.
  const size_t text = a.node_id.size() + a.hostname.size() + a.addr.size() + b.node_id.size() + b.hostname.size() +
                      b.addr.size();
  REQUIRE(sum.Reserve(3, text));
  const absl::Time now = absl::FromUnixSeconds(1000);
  sum.Add(b, 1, /*finished=*/true, now - absl::Seconds(3));
  sum.Add(c, 2, false, absl::InfinitePast());
  sum.Add(a, 0, false, now - absl::Seconds(1));
  sum.Seal();
  CHECK(sum.size() == 3);
  RunStatus s;
  s.world_size = 0;
  sum.AppendTo(s, "failed", now);
  REQUIRE(s.node_list.size() == 3);
  CHECK(s.world_size == 13);
  CHECK(s.node_list[0].node_id == "id-a");
  CHECK(s.node_list[0].hostname == "host-a");
  CHECK(s.node_list[0].addr == "10.0.0.1");
  CHECK(s.node_list[0].node_rank == 0);
  CHECK(s.node_list[0].nproc == 4);
  CHECK(s.node_list[0].state == "failed");
  CHECK(s.node_list[0].keepalive_age == absl::Seconds(1));
  CHECK(s.node_list[1].node_id == "id-b");
  CHECK(s.node_list[1].hostname == "host-bb");
  CHECK(s.node_list[1].addr == "10.0.0.22");
  CHECK(s.node_list[1].state == "finished");
  CHECK(s.node_list[1].keepalive_age == absl::Seconds(3));
  CHECK(s.node_list[2].node_id.empty());
  CHECK(s.node_list[2].addr.empty());
  CHECK(s.node_list[2].keepalive_age < absl::ZeroDuration());  // Never seen.
}

TEST_CASE("run summary: nodes' text past 4 GiB is refused (32-bit offsets)", "[run_summary]") {
  RunSummary sum;
  CHECK_FALSE(sum.Reserve(1, size_t{UINT32_MAX} + 1));
  CHECK(sum.size() == 0);
  CHECK(sum.Reserve(0, 0));
}
