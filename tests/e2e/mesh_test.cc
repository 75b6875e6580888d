// libmesh end to end: real workers under meshrun building meshes over Gloo
// through the rendezvous store.
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <set>

#include "tests/e2e/e2e_util.h"
#include "tests/support/skip.h"

using namespace meshrun::testing;

namespace {

std::string Example(const std::string& name) { return BinaryDir() + "/examples/" + name; }

RunResult Launch(int nproc, std::vector<std::string> prog, std::vector<std::string> flags = {}, double timeout = 120) {
  std::vector<std::string> argv = {MeshrunBinary(), "--standalone", "--nproc_per_node=" + std::to_string(nproc)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), prog.begin(), prog.end());
  return RunCommand(argv, {}, timeout);
}

}  // namespace

TEST_CASE("the examples pass on 8 CPU ranks and fail with a corrupt rank", "[e2e][mesh]") {
  struct Ex { std::string name; std::string ok_marker; int ok_count; };
  for (const Ex& ex : {Ex{"two_d_setup", "_sum=", 16}, Ex{"hsdp", " OK", 8}, Ex{"three_d_slicing", "slices OK", 8}}) {
    INFO(ex.name);
    RunResult good = Launch(8, {Example(ex.name), "--device", "cpu"});
    INFO(good.err);
    CHECK(good.exit_code == 0);
    CHECK(CountOccurrences(good.out, ex.ok_marker) == ex.ok_count);
    RunResult bad = Launch(8, {Example(ex.name), "--device=cpu", "--corrupt_rank=5"});
    CHECK(bad.exit_code != 0);
  }
}

TEST_CASE("hsdp matches a single-process run and halves its loss", "[e2e][mesh]") {
  RunResult r = Launch(8, {Example("hsdp")});
  REQUIRE(r.exit_code == 0);
  std::regex re("first_loss=([0-9.]+) last_loss=([0-9.]+) max_param_diff=([0-9.e+-]+) OK");
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, re));
  CHECK(std::stod(m[2]) <= std::stod(m[1]) / 2);
  CHECK(std::stod(m[3]) <= 1e-5);
  CHECK(Contains(r.out, "params=165 padded=168"));
}

TEST_CASE("every collective on every dimension, several shapes", "[e2e][mesh]") {
  for (auto [nproc, shape] : std::vector<std::pair<int, std::string>>{{8, "2,4"}, {6, "2,3"}, {8, "2,2,2"}, {3, "3"}}) {
    INFO(shape);
    RunResult r = Launch(nproc, {BinaryDir() + "/tests/mesh_collectives_worker", shape});
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(CountOccurrences(r.out, "collectives OK") == nproc);
  }
}

TEST_CASE("members that disagree on the mesh fail naming the rank and field", "[e2e][mesh]") {
  RunResult r = Launch(8, {BinaryDir() + "/tests/mesh_probe", "mismatch", "3"});
  CHECK(r.exit_code == 3);
  // Every member fails with the same verdict, which names rank 3.
  INFO(r.out);
  CHECK(Contains(r.out, "mesh mismatch: rank 3 and rank 0 disagree on the shape: (4,2) vs (2,4)"));
  CHECK(r.seconds < 15);
}

TEST_CASE("a member that never arrives fails the others at the timeout, named", "[e2e][mesh]") {
  RunResult r = Launch(8, {BinaryDir() + "/tests/mesh_probe", "absent", "5", "1500"});
  CHECK(r.exit_code == 3);
  CHECK(Contains(r.out, "rank 5 (coordinate"));
  CHECK(Contains(r.out, "did not arrive within 1.5s"));
  CHECK(r.seconds < 10);
}

TEST_CASE("a mesh over a subset of ranks: outsiders get 'not a member'", "[e2e][mesh]") {
  RunResult r = Launch(8, {BinaryDir() + "/tests/mesh_probe", "subset"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(CountOccurrences(r.out, "subset OK") == 4);
  CHECK(CountOccurrences(r.out, "is not a member of this mesh") == 4);
}

TEST_CASE("a mesh with releasable keys deletes them and keeps working, and a write-once mesh keeps its keys",
          "[e2e][mesh]") {
  RunResult r = Launch(4, {BinaryDir() + "/tests/mesh_probe", "release"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(CountOccurrences(r.out, "release OK") == 4);
  CHECK(Contains(r.out, "its store keys are write-once (MeshOptions::releasable_keys was false)"));
}

TEST_CASE("NCCL unique ids: one per row, one store request per rank for all dimensions, fresh each round",
          "[e2e][mesh][nccl]") {
  std::string dir = TempDir();
  // Round 0 ends with a deliberate failure of rank 0, so round 1 runs again.
  std::string script = WriteScript(dir, "ids.sh",
                                   BinaryDir() + "/tests/mesh_probe ncclids || exit $?\n"
                                   "[ \"$MESHRUN_ROUND\" = 0 ] && [ \"$RANK\" = 0 ] && exit 1\nexit 0");
  RunResult r = Launch(8, {script}, {"--max_restarts=1"});
  if (r.exit_code == 77 || Contains(r.out, "SKIPPED")) MESHRUN_SKIP("libmesh built without NCCL");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Contains(r.out, "KvMultiGet=8 KvCompareSet=0 requests_per_rank_per_dim=0.50"));
  CHECK(CountOccurrences(r.out, "round=1 shard_id=") == 8);
  std::regex re("round=(\\d) shard_id=([0-9a-f]+)");
  std::set<std::string> round0, round1;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), re); it != std::sregex_iterator(); ++it) {
    ((*it)[1] == "0" ? round0 : round1).insert((*it)[2]);
  }
  CHECK(round1.size() == 2);  // Two shard rows, two ids.
  for (const auto& id : round1) CHECK(round0.count(id) == 0);
}

TEST_CASE("meshrun mesh refuses a bad shape with exit 2", "[e2e][mesh]") {
  RunResult r = RunCommand({MeshrunBinary(), "mesh", "--nnodes=2", "--nproc_per_node=4", "--shape", "3,4"}, {}, 10);
  CHECK(r.exit_code == 2);
  CHECK(CountLines(r.err, "") == 1);
  CHECK(Contains(r.err, "(3, 4) has 12 ranks"));
}

TEST_CASE("meshrun mesh names an empty dimension name instead of dropping it", "[e2e][mesh]") {
  RunResult r = RunCommand({MeshrunBinary(), "mesh", "--nproc_per_node=8", "--shape", "2,4", "--names", "a,"}, {}, 10);
  CHECK(r.exit_code == 2);
  CHECK(Contains(r.err, "mesh dimension names must not be empty"));
}

TEST_CASE("GPU checks from a bundle: skipped (77) without a GPU: a foreign folder is never replaced",
          "[e2e][gpu-scripts]") {
  std::string dir = TempDir();
  RunResult bundle = RunCommand({"/bin/bash", SourceDir() + "/scripts/gpu-bundle.sh", dir + "/bundle"}, {}, 120);
  INFO(bundle.out << bundle.err);
  REQUIRE(bundle.exit_code == 0);
  RunResult check = RunCommand({"/bin/bash", dir + "/bundle/gpu-check.sh"}, {{"OUT", dir + "/logs"}}, 300);
  INFO(check.out << check.err);
  if (check.exit_code == 77) {
    CHECK(Contains(check.out, "SKIP all checks: no usable CUDA device"));
  } else {
    CHECK(check.exit_code == 0);  // a machine with a GPU: every check passed
  }
  std::filesystem::create_directories(dir + "/mine");
  RunResult refuse = RunCommand({"/bin/bash", SourceDir() + "/scripts/gpu-bundle.sh", dir + "/mine"}, {}, 60);
  CHECK(refuse.exit_code == 2);
  CHECK(Contains(refuse.err, "is not a bundle made by this script; not replacing it"));
  CHECK(std::filesystem::exists(dir + "/mine"));
}

TEST_CASE("an out-of-tree program builds against the installed package and runs", "[e2e][install]") {
  std::string dir = TempDir();
  std::string prefix = dir + "/prefix";
  // What the Debian packages meshrun and meshrun-dev hold (cmake/MeshrunPackaging.cmake).
  for (const char* component : {"meshrun", "meshrun-dev"}) {
    RunResult inst = RunCommand({"/usr/bin/env", "cmake", "--install", BinaryDir(), "--prefix", prefix,
                                 "--component", component}, {}, 120);
    INFO(inst.out << inst.err);
    REQUIRE(inst.exit_code == 0);
  }
  RunResult conf = RunCommand({"/usr/bin/env", "cmake", "-S", SourceDir() + "/tests/install_consumer", "-B",
                               dir + "/build", "-DCMAKE_PREFIX_PATH=" + prefix}, {}, 180);
  INFO(conf.out << conf.err);
  REQUIRE(conf.exit_code == 0);
  RunResult build = RunCommand({"/usr/bin/env", "cmake", "--build", dir + "/build"}, {}, 300);
  INFO(build.out << build.err);
  REQUIRE(build.exit_code == 0);
  // The shared libmesh, and the static one on the system's Abseil (as
  // meshrun-dev gives it: no bundled Abseil), each a 2-D Gloo mesh.
  for (const char* program : {"mesh_consumer", "mesh_consumer_static"}) {
    INFO(program);
    const bool built = std::filesystem::exists(dir + "/build/" + program);
    // The static library is installed by portable builds only (not the
    // sanitizer's).
    if (std::string(program) == "mesh_consumer_static" && !std::filesystem::exists(prefix + "/lib/libmeshrun_mesh.a")) {
      continue;
    }
    CHECK(built);
    if (!built) continue;
    RunResult run = Launch(4, {dir + "/build/" + program});
    INFO(run.err);
    CHECK(run.exit_code == 0);
    CHECK(CountOccurrences(run.out, "_sum=") == 8);
    CHECK(CountOccurrences(run.out, " OK\n") == 8);
  }
}
