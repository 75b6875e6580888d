#include <catch2/catch.hpp>

#include "launcher/launch_config.h"

using namespace meshrun::launcher;

TEST_CASE("nnodes takes N or MIN:MAX", "[flags]") {
  CHECK(*ParseNnodes("4") == std::make_pair(4, 4));
  CHECK(*ParseNnodes("1:3") == std::make_pair(1, 3));
  for (const char* bad : {"0", "3:2", "a", "1:2:3", "", "-1"}) {
    auto r = ParseNnodes(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(std::string(r.status().message()).find(std::string("--nnodes=") + bad) != std::string::npos);
  }
}

TEST_CASE("nproc_per_node resolves numbers, cpu, auto: gpu needs a GPU", "[flags]") {
  CHECK(*ResolveNprocPerNode("8") == 8);
  CHECK(*ResolveNprocPerNode("cpu") >= 1);
  CHECK(*ResolveNprocPerNode("auto") >= 1);
  CHECK_FALSE(ResolveNprocPerNode("0").ok());
  CHECK_FALSE(ResolveNprocPerNode("many").ok());
  if (CountVisibleGpus() == 0) CHECK_FALSE(ResolveNprocPerNode("gpu").ok());
}

TEST_CASE("rdzv_conf takes torchrun's keys and names unknown ones", "[flags]") {
  LaunchConfig c;
  REQUIRE(ApplyRdzvConf("join_timeout=5,last_call_timeout=0.5,is_host=0,read_timeout=7", &c).ok());
  CHECK(c.agent.join_timeout == absl::Seconds(5));
  CHECK(c.agent.last_call_timeout == absl::Milliseconds(500));
  CHECK(c.agent.read_timeout == absl::Seconds(7));
  REQUIRE(c.is_host.has_value());
  CHECK_FALSE(*c.is_host);
  absl::Status bad = ApplyRdzvConf("bogus=1", &c);
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.message()).find("bogus") != std::string::npos);
  CHECK(std::string(bad.message()).find("join_timeout") != std::string::npos);
  CHECK_FALSE(ApplyRdzvConf("join_timeout=abc", &c).ok());
  CHECK_FALSE(ApplyRdzvConf("novalue", &c).ok());
}
