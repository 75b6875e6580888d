// PyTorch programs run under meshrun unchanged, as under torchrun. Skipped
// (not passed) when no interpreter with torch is installed.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <sstream>

#include "tests/e2e/e2e_util.h"
#include "tests/support/skip.h"

using namespace meshrun::testing;

namespace {

std::map<std::string, std::map<std::string, std::string>> ParseEnvDump(const std::string& out) {
  std::map<std::string, std::map<std::string, std::string>> by_rank;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    // meshrun prefixes each worker line with "[n<node>:r<rank>] ".
    size_t at = line.find("ENV ");
    if (at == std::string::npos) continue;
    line = line.substr(at);
    size_t sp = line.find(' ', 4);
    std::string rank = line.substr(4, sp - 4);
    std::string kv = line.substr(sp + 1);
    size_t eq = kv.find('=');
    by_rank[rank][kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return by_rank;
}

}  // namespace

TEST_CASE("worker variables match torchrun's, but for the documented ones", "[e2e][torch]") {
  std::string py = TorchPython();
  if (py.empty()) MESHRUN_SKIP("no python3 with torch (install python3-torch)");
  std::string script = SourceDir() + "/tests/py/print_env.py";
  std::map<std::string, std::string> env = {{"PYTHON_EXEC", py}, {"OMP_NUM_THREADS", "<unset>"}};
  RunResult m = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=4", script}, env, 120);
  REQUIRE(m.exit_code == 0);
  RunResult t = RunCommand({py, SourceDir() + "/tools/torchrun_shim.py", "--standalone", "--nproc_per_node=4", script},
                           {{"OMP_NUM_THREADS", "<unset>"}}, 180);
  INFO(t.err);
  REQUIRE(t.exit_code == 0);
  auto mine = ParseEnvDump(m.out);
  auto theirs = ParseEnvDump(t.out);
  REQUIRE(mine.size() == 4);
  REQUIRE(theirs.size() == 4);
  // Allowed to differ: a fresh port and run id per launch, the per-attempt
  // error-file path, meshrun's MESHRUN_* extras, MASTER_ADDR (meshrun gives
  // a numeric address, torchrun 1.13 the host's FQDN), and
  // TORCH_NCCL_ASYNC_ERROR_HANDLING, which newer torchrun sets and 1.13
  // does not (it sets only the older NCCL_ASYNC_ERROR_HANDLING), and
  // TORCHELASTIC_SIGNALS_TO_HANDLE: torchrun 2.x sets it (1.13 does not),
  // and meshrun's default list adds SIGUSR1 and SIGUSR2; and
  // TORCHELASTIC_USE_AGENT_STORE: meshrun serves torchrun 2.x's agent store
  // (True), torchrun 1.13's c10d backend does not (False).
  const std::set<std::string> may_differ = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE",
                                            "MASTER_ADDR", "TORCHELASTIC_SIGNALS_TO_HANDLE",
                                            "TORCHELASTIC_USE_AGENT_STORE"};
  for (const auto& [rank, vars] : theirs) {
    const auto& ours = mine.at(rank);
    for (const auto& [k, v] : vars) {
      if (may_differ.count(k) || k.rfind("MESHRUN_", 0) == 0) continue;
      INFO("rank " << rank << " variable " << k);
      REQUIRE(ours.count(k) == 1);
      CHECK(ours.at(k) == v);
    }
    for (const auto& [k, v] : ours) {
      // GLOO_SOCKET_IFNAME: the interface of the node's advertised address,
      // set when unset so PyTorch's Gloo does not bind 127.0.1.1 (docs/design.md §3).
      if (k.rfind("MESHRUN_", 0) == 0 || k == "PYTHON_EXEC" || k == "TORCH_NCCL_ASYNC_ERROR_HANDLING" ||
          k == "GLOO_SOCKET_IFNAME" || k == "TORCHELASTIC_SIGNALS_TO_HANDLE" ||
          // torchft's lighthouse at the node's agent (docs/worker-environment.md).
          k == "TORCHFT_LIGHTHOUSE") {
        continue;
      }
      INFO("rank " << rank << " meshrun-only variable " << k);
      CHECK(vars.count(k) == 1);
    }
    CHECK(ours.at("GLOO_SOCKET_IFNAME") == "lo");  // Standalone: loopback.
    CHECK(ours.at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2");
    CHECK(ours.at("MESHRUN_NODE_ADDR") == "127.0.0.1");
    CHECK(ours.at("TORCHFT_LIGHTHOUSE").rfind("http://127.0.0.1:", 0) == 0);
    CHECK(ours.at("MASTER_PORT") != "");
    CHECK(ours.at("TORCHELASTIC_ERROR_FILE") != "");
  }
}

TEST_CASE("a 2-D mesh of 8 workers over PyTorch's Gloo: per-dimension groups, checked all-reduces",
          "[e2e][torch]") {
  std::string py = TorchPython();
  if (py.empty()) MESHRUN_SKIP("no python3 with torch (install python3-torch)");
  const std::string api = TorchMeshApi(py);
  const std::string prog = SourceDir() + "/tests/py/two_d_mesh.py";
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=8", prog}, {{"PYTHON_EXEC", py}}, 240);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  // (2, 4): rows {0..3} {4..7} sum to 6 and 22; columns {c, c+4} to 4, 6, 8, 10.
  for (int rank = 0; rank < 8; ++rank) {
    const int row = rank / 4, col = rank % 4;
    const int shard = row == 0 ? 6 : 22, replicate = 2 * col + 4;
    CHECK(Contains(r.out, "rank=" + std::to_string(rank) + " api=" + api + " mesh=2x4 coords=(" +
                              std::to_string(row) + ", " + std::to_string(col) + ") shard_sum=" +
                              std::to_string(shard) + " replicate_sum=" + std::to_string(replicate) + " OK"));
  }
  CHECK(CountOccurrences(r.out, " OK") == 8);

  // The same program on a (4, 2) mesh, and with one rank's contribution
  // corrupted: its groups' checks fail, and so does the job.
  RunResult tall = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=8", prog, "--rows=4"},
                              {{"PYTHON_EXEC", py}}, 240);
  INFO(tall.out << tall.err);
  CHECK(tall.exit_code == 0);
  CHECK(Contains(tall.out, "rank=5 api=" + api + " mesh=4x2 coords=(2, 1) shard_sum=9 replicate_sum=16 OK"));
  RunResult bad = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=4", prog, "--corrupt_rank=3"},
                             {{"PYTHON_EXEC", py}}, 240);
  INFO(bad.out << bad.err);
  CHECK(bad.exit_code != 0);
  CHECK(Contains(bad.out + bad.err, "rank=3 api=" + api + ": all-reduce over the shard group is 1005, expected 5"));
}

TEST_CASE("DistributedDataParallel on gloo via env:// runs unchanged", "[e2e][torch]") {
  std::string py = TorchPython();
  if (py.empty()) MESHRUN_SKIP("no python3 with torch (install python3-torch)");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=4",
                            SourceDir() + "/tests/py/ddp_gloo.py"}, {{"PYTHON_EXEC", py}}, 240);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(CountOccurrences(r.out, "DDP OK") == 4);
}

TEST_CASE("module mode runs python -u -m", "[e2e][torch]") {
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", "-m", "hello_module", "x"},
                           {{"PYTHONPATH", SourceDir() + "/tests/py"}}, 60);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(CountOccurrences(r.out, "module rank=") == 2);
  CHECK(Contains(r.out, "args=['x']"));
}
