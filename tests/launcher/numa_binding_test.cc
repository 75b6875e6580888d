#include <catch2/catch.hpp>

#include <hwloc.h>
#include <unistd.h>

#include "launcher/numa_binding.h"
#include "tests/support/subprocess.h"
#include "tests/support/skip.h"

using namespace meshrun::launcher;

namespace {

std::vector<int> Range(int lo, int hi) {
  std::vector<int> v;
  for (int i = lo; i <= hi; ++i) v.push_back(i);
  return v;
}

// 2 packages x 2 NUMA nodes x 2 L3 x 2 cores x 2 PUs: node n holds PUs 8n..8n+7.
constexpr const char* kTwoSockets = "package:2 numa:2 l3:2 core:2 pu:2";

}  // namespace

TEST_CASE("numa modes parse, a bad one is named", "[numa]") {
  CHECK(*ParseNumaMode("node") == NumaMode::kNode);
  CHECK(*ParseNumaMode("socket") == NumaMode::kSocket);
  CHECK(*ParseNumaMode("exclusive") == NumaMode::kExclusive);
  CHECK(*ParseNumaMode("core-complex") == NumaMode::kCoreComplex);
  auto bad = ParseNumaMode("numa");
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()) == "--numa_binding=numa: must be node, socket, exclusive or core-complex");
}

TEST_CASE("node and socket modes on a synthetic two-socket topology", "[numa]") {
  auto topo = Topology::FromSynthetic(kTwoSockets);
  REQUIRE(topo.ok());
  auto node = PlaceRanks(*topo, NumaMode::kNode, {0, 0, 1, 3});
  REQUIRE(node.ok());
  CHECK((*node)[0].cpus == Range(0, 7));
  CHECK((*node)[1].cpus == Range(0, 7));
  CHECK((*node)[2].cpus == Range(8, 15));
  CHECK((*node)[3].cpus == Range(24, 31));
  CHECK((*node)[3].mem_nodes == std::vector<int>{3});
  auto socket = PlaceRanks(*topo, NumaMode::kSocket, {1, 2});
  REQUIRE(socket.ok());
  CHECK((*socket)[0].cpus == Range(0, 15));
  CHECK((*socket)[0].mem_nodes == std::vector<int>{0, 1});
  CHECK((*socket)[1].cpus == Range(16, 31));
  CHECK((*socket)[1].mem_nodes == std::vector<int>{2, 3});
  auto missing = PlaceRanks(*topo, NumaMode::kNode, {9});
  REQUIRE_FALSE(missing.ok());
  CHECK(std::string(missing.status().message()) ==
        "--numa_binding=node: GPU 0 is on NUMA node 9, which the topology does not have");
}

TEST_CASE("exclusive shares out whole cores, disjoint and as even as possible", "[numa]") {
  auto topo = Topology::FromSynthetic(kTwoSockets);
  REQUIRE(topo.ok());
  // Three ranks on node 0 (4 cores), one on node 2.
  auto p = PlaceRanks(*topo, NumaMode::kExclusive, {0, 2, 0, 0});
  REQUIRE(p.ok());
  CHECK((*p)[0].cpus == Range(0, 3));  // Two cores: 4 cores do not divide by 3.
  CHECK((*p)[2].cpus == Range(4, 5));
  CHECK((*p)[3].cpus == Range(6, 7));
  CHECK((*p)[1].cpus == Range(16, 23));  // Alone on node 2: all of it.
  auto crowded = PlaceRanks(*topo, NumaMode::kExclusive, {0, 0, 0, 0, 0});
  REQUIRE_FALSE(crowded.ok());
  CHECK(std::string(crowded.status().message()) ==
        "--numa_binding=exclusive: NUMA node 0 has 4 cores for 5 local ranks; use node or socket");
}

TEST_CASE("core-complex gives each rank its own L3 while there are enough", "[numa]") {
  auto topo = Topology::FromSynthetic(kTwoSockets);
  REQUIRE(topo.ok());
  auto p = PlaceRanks(*topo, NumaMode::kCoreComplex, {0, 0, 0, 1});
  REQUIRE(p.ok());
  CHECK((*p)[0].cpus == Range(0, 3));
  CHECK((*p)[1].cpus == Range(4, 7));
  CHECK((*p)[2].cpus == Range(0, 3));  // Node 0 has two L3s: reused in turn.
  CHECK((*p)[3].cpus == Range(8, 11));
  auto no_l3 = Topology::FromSynthetic("package:1 numa:1 core:2 pu:1");
  REQUIRE(no_l3.ok());
  auto refused = PlaceRanks(*no_l3, NumaMode::kCoreComplex, {0});
  REQUIRE_FALSE(refused.ok());
  CHECK(std::string(refused.status().message()) ==
        "--numa_binding=core-complex: NUMA node 0 has no L3 cache inside it; use node or exclusive");
}

TEST_CASE("a topology from an hwloc XML file places the same way", "[numa]") {
  auto synthetic = Topology::FromSynthetic(kTwoSockets);
  REQUIRE(synthetic.ok());
  std::string xml = meshrun::testing::TempDir() + "/two_sockets.xml";
  REQUIRE(hwloc_topology_export_xml(synthetic->get(), xml.c_str(), 0) == 0);
  auto loaded = Topology::FromXml(xml);
  REQUIRE(loaded.ok());
  auto p = PlaceRanks(*loaded, NumaMode::kSocket, {3});
  REQUIRE(p.ok());
  CHECK((*p)[0].cpus == Range(16, 31));
  CHECK_FALSE(Topology::FromXml("/no/such/topology.xml").ok());
  CHECK_FALSE(Topology::FromSynthetic("package:banana").ok());
}

TEST_CASE("on a machine without GPUs numa binding is a clear error", "[numa]") {
  auto here = Topology::ThisMachine();
  REQUIRE(here.ok());
  if (!here->NvidiaGpuNumaNodes().empty()) MESHRUN_SKIP("this machine has NVIDIA GPUs");
  auto p = PlaceOnThisMachine(NumaMode::kNode, 2, std::nullopt);
  REQUIRE_FALSE(p.ok());
  CHECK(std::string(p.status().message()).find("--numa_binding=node: no NVIDIA GPU on this machine") == 0);
}
