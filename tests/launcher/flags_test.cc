#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "launcher/cli.h"
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

namespace {

// Parses `meshrun <args> /bin/true`; the config, or nullopt on a usage error.
std::optional<LaunchConfig> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "meshrun");
  args.push_back("/bin/true");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ParseOutcome out = ParseCommandLine(static_cast<int>(argv.size()), argv.data());
  return out.config;
}

}  // namespace

// The forms of torchrun's command line (docs/user-guide.md, "Command-line
// forms"), each with its meaning under meshrun.
TEST_CASE("torchrun's command-line forms", "[flags]") {
  SECTION("one node, nothing else: standalone (as newest torchrun)") {
    auto c = Parse({"--nproc_per_node=2"});
    REQUIRE(c);
    CHECK(c->standalone);
  }
  SECTION("--standalone") {
    auto c = Parse({"--standalone", "--nproc-per-node=2"});
    REQUIRE(c);
    CHECK(c->standalone);
    CHECK(c->agent.max_nodes == 1);
  }
  SECTION("one node with a master port: static at 127.0.0.1:port") {
    auto c = Parse({"--nnodes=1", "--master_port=29611"});
    REQUIRE(c);
    CHECK_FALSE(c->standalone);
    CHECK(c->backend == Backend::kStatic);
    CHECK(c->endpoint_host == "127.0.0.1");
    CHECK(c->endpoint_port == 29611);
  }
  SECTION("the classic multi-node form: static at master_addr:master_port") {
    auto c = Parse({"--nnodes=2", "--node_rank=1", "--master_addr=10.1.2.3", "--master_port=29612"});
    REQUIRE(c);
    CHECK(c->backend == Backend::kStatic);
    CHECK(c->endpoint_host == "10.1.2.3");
    CHECK(c->endpoint_port == 29612);
    CHECK(c->agent.node_rank == 1);
    REQUIRE(c->is_host.has_value());
    CHECK_FALSE(*c->is_host);
    auto c0 = Parse({"--nnodes", "2", "--node-rank", "0", "--master-addr", "host0", "--master-port", "29612"});
    REQUIRE(c0);
    CHECK(c0->endpoint_host == "host0");
    REQUIRE(c0->is_host.has_value());
    CHECK(*c0->is_host);
  }
  SECTION("multi-node with no address: static at torchrun's default 127.0.0.1:29500") {
    auto c = Parse({"--nnodes=2"});
    REQUIRE(c);
    CHECK(c->backend == Backend::kStatic);
    CHECK(c->endpoint_host == "127.0.0.1");
    CHECK(c->endpoint_port == 29500);
  }
  SECTION("an endpoint without a backend: meshrun's rendezvous there") {
    auto c = Parse({"--nnodes=2", "--rdzv_endpoint=host0:29400", "--rdzv_id=job1"});
    REQUIRE(c);
    CHECK(c->backend == Backend::kMeshrun);
    CHECK(c->endpoint_host == "host0");
    CHECK(c->agent.run_id == "job1");
  }
  SECTION("c10d with an endpoint, elastic") {
    auto c = Parse({"--nnodes=1:4", "--rdzv_backend=c10d", "--rdzv_endpoint=host0", "--rdzv_id=job2"});
    REQUIRE(c);
    CHECK(c->backend == Backend::kMeshrun);
    CHECK(c->endpoint_port == 29400);
    CHECK(c->agent.min_nodes == 1);
    CHECK(c->agent.max_nodes == 4);
  }
  SECTION("static with an endpoint") {
    auto c = Parse({"--nnodes=2", "--node_rank=0", "--rdzv_backend=static", "--master_addr=host0",
                    "--master_port=29613"});
    REQUIRE(c);
    CHECK(c->backend == Backend::kStatic);
    CHECK(c->endpoint_port == 29613);
  }
  SECTION("c10d without an endpoint is refused") {
    CHECK_FALSE(Parse({"--nnodes=2", "--rdzv_backend=c10d"}));
  }
  SECTION("Kubeflow's PET_* variables with a bare command") {
    ::setenv("PET_NNODES", "2", 1);
    ::setenv("PET_NPROC_PER_NODE", "3", 1);
    ::setenv("PET_NODE_RANK", "1", 1);
    ::setenv("PET_MASTER_ADDR", "trainer-node-0", 1);
    ::setenv("PET_MASTER_PORT", "23456", 1);
    auto c = Parse({});
    for (const char* v : {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}) {
      ::unsetenv(v);
    }
    REQUIRE(c);
    CHECK(c->backend == Backend::kStatic);
    CHECK(c->endpoint_host == "trainer-node-0");
    CHECK(c->endpoint_port == 23456);
    CHECK(c->agent.node_rank == 1);
    CHECK(c->agent.nproc == 3);
    CHECK(c->agent.max_nodes == 2);
  }
  SECTION("a single node given PET_MASTER_PORT is not standalone") {
    ::setenv("PET_MASTER_PORT", "23457", 1);
    auto c = Parse({});
    ::unsetenv("PET_MASTER_PORT");
    REQUIRE(c);
    CHECK_FALSE(c->standalone);
    CHECK(c->endpoint_port == 23457);
  }
}

TEST_CASE("a repeated flag takes its last value, as torchrun's argparse", "[flags]") {
  auto c = Parse({"--nnodes=2", "--rdzv_endpoint=h:1", "--rdzv_conf=join_timeout=1", "--nproc_per_node=1",
                  "--rdzv_conf=join_timeout=2", "--nproc-per-node=3"});
  REQUIRE(c);
  CHECK(c->agent.join_timeout == absl::Seconds(2));
  CHECK(c->agent.nproc == 3);
}

TEST_CASE("a misspelled flag gets the nearest flags, in the user's spelling, and nothing when none is near", "[flags]") {
  CLI::App app{"t"};
  std::string v;
  app.add_option("--nproc_per_node,--nproc-per-node", v);
  app.add_option("--rdzv_endpoint,--rdzv-endpoint", v);
  app.add_option("--rdzv_id,--rdzv-id", v);
  CHECK(DidYouMeanFlag(app, "--nproc-per-nod=2") == " (did you mean --nproc-per-node?)");
  CHECK(DidYouMeanFlag(app, "--nproc_per_nod") == " (did you mean --nproc_per_node?)");
  CHECK(DidYouMeanFlag(app, "--rdzv_ids") == " (did you mean --rdzv_id?)");
  CHECK(DidYouMeanFlag(app, "--frobnicate") == "");
  // A prefix: every flag it begins (argparse would take a unique one), then misspellings.
  CHECK(DidYouMeanFlag(app, "--nproc_per=2") == " (did you mean --nproc_per_node?)");
  CHECK(DidYouMeanFlag(app, "--rdzv") == " (did you mean --rdzv_endpoint or --rdzv_id?)");
  CHECK(DidYouMeanFlag(app, "--rdzv-e") == " (did you mean --rdzv-endpoint?)");
  CHECK(NearestNames("max_run", {"max_runs", "max_nodes", "max_wait", "join_timeout"}) ==
        std::vector<std::string>{"max_runs"});
  CHECK(NearestNames("tls_cs", {"tls_cert", "tls_key", "tls_ca"}) == std::vector<std::string>{"tls_ca"});
  CHECK(NearestNames("tls_xx", {"tls_cb", "tls_ca"}) == std::vector<std::string>{"tls_cb", "tls_ca"});  // A tie: given order.
  CHECK(NearestNames("", {"a", "abc"}).size() == 1);
}

TEST_CASE("the --replica_groups flag: R groups of --nnodes / R nodes each, bad values refused", "[flags]") {
  auto c = Parse({"--nnodes=4:6", "--replica-groups=2", "--rdzv_endpoint=h:1", "--rdzv_id=job"});
  REQUIRE(c);
  CHECK(c->agent.replica_groups == 2);
  CHECK(c->agent.min_nodes == 2);
  CHECK(c->agent.max_nodes == 3);
  CHECK(c->agent.run_id == "job");
  auto none = Parse({"--nnodes=4", "--rdzv_endpoint=h:1", "--rdzv_id=job"});
  REQUIRE(none);
  CHECK(none->agent.replica_groups == 0);
  CHECK(none->agent.max_nodes == 4);
  CHECK_FALSE(Parse({"--nnodes=3", "--replica_groups=2", "--rdzv_endpoint=h:1"}));   // Not a multiple.
  CHECK_FALSE(Parse({"--nnodes=2:4", "--replica_groups=4", "--rdzv_endpoint=h:1"}));  // MIN not a multiple.
  CHECK_FALSE(Parse({"--nnodes=2", "--replica_groups=-1", "--rdzv_endpoint=h:1"}));
  CHECK_FALSE(Parse({"--nnodes=2", "--replica_groups=0", "--rdzv_endpoint=h:1"}));  // 0 is not "unset".
  CHECK_FALSE(Parse({"--standalone", "--replica_groups=2"}));
  auto one = Parse({"--standalone", "--replica_groups=1"});  // One group of one node.
  REQUIRE(one);
  CHECK(one->agent.replica_groups == 1);
  CHECK_FALSE(Parse({"--nnodes=2", "--replica_groups=2", "--rdzv_backend=static", "--master_addr=h"}));
}

TEST_CASE("the --min_replica_groups flag: 1..R, only with --replica_groups", "[flags]") {
  auto c = Parse({"--nnodes=3", "--replica_groups=3", "--min-replica-groups=2", "--rdzv_endpoint=h:1"});
  REQUIRE(c);
  CHECK(c->agent.min_replica_groups == 2);
  auto d = Parse({"--nnodes=3", "--replica_groups=3", "--rdzv_endpoint=h:1"});
  REQUIRE(d);
  CHECK(d->agent.min_replica_groups == 1);
  CHECK_FALSE(Parse({"--nnodes=3", "--replica_groups=3", "--min_replica_groups=4", "--rdzv_endpoint=h:1"}));
  CHECK_FALSE(Parse({"--nnodes=3", "--replica_groups=3", "--min_replica_groups=0", "--rdzv_endpoint=h:1"}));
  CHECK_FALSE(Parse({"--nnodes=3", "--min_replica_groups=1", "--rdzv_endpoint=h:1"}));  // No replica groups.
}
