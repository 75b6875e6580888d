// examples/train.py, the PyTorch trainer users start from, under meshrun on
// loopback with Debian's PyTorch (Gloo): 2 nodes x 2 workers stopped by
// SIGTERM write a checkpoint and resume from it in a new job; a worker that
// fails is restarted by meshrun (TORCHELASTIC_RESTART_COUNT 1) and resumes
// from the last periodic checkpoint. Skipped (not passed) without torch.
#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>
#include <regex>

#include "common/net.h"
#include "tests/e2e/e2e_util.h"
#include "tests/support/skip.h"

using namespace meshrun::testing;

namespace {

std::vector<std::string> TwoNodeArgs(int port, const std::string& run, const std::string& addr,
                                     const std::vector<std::string>& train_args) {
  std::vector<std::string> a = {"--nnodes=2", "--nproc_per_node=2", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                                "--rdzv_id=" + run, "--local_addr=" + addr, "--shutdown_timeout=30",
                                SourceDir() + "/examples/train.py"};
  a.insert(a.end(), train_args.begin(), train_args.end());
  return a;
}

// The number after `prefix` in the first line of `text` that has it, or -1.
int NumberAfter(const std::string& text, const std::string& prefix) {
  const size_t at = text.find(prefix);
  if (at == std::string::npos) return -1;
  std::smatch m;
  const std::string rest = text.substr(at + prefix.size(), 32);
  return std::regex_search(rest, m, std::regex("^(\\d+)")) ? std::stoi(m[1]) : -1;
}

}  // namespace

TEST_CASE("examples/train.py: SIGTERM to 2 nodes x 2 workers saves a checkpoint, a new job resumes from it",
          "[e2e][torch][example]") {
  std::string py = TorchPython();
  if (py.empty()) MESHRUN_SKIP("no python3 with torch (install python3-torch)");
  const std::string dir = TempDir();
  const std::string ckpt = dir + "/ckpt";
  const std::map<std::string, std::string> env = {{"PYTHON_EXEC", py}};
  const std::vector<std::string> train = {"--checkpoint_dir=" + ckpt, "--checkpoint_every=0", "--log_every=5"};

  // 1. Training that would run for long: stopped by SIGTERM to both
  //    meshruns (as Slurm's scancel or Kubernetes stopping the pods do).
  //    Node B first, then node A (which hosts the server) once B stops its
  //    workers: a meshrun that hosts the server stops serving as soon as it
  //    gets a stop signal, and a node that loses the server while it has
  //    not been signalled yet stops its workers and takes its own SIGTERM,
  //    arriving then, for a second signal: SIGKILL, no grace. Signalled in
  //    this order every worker gets its grace, which is what is tested here.
  int port = FreePort();
  auto args = [&](const std::string& addr, const std::string& run, std::vector<std::string> extra) {
    extra.insert(extra.end(), train.begin(), train.end());
    return TwoNodeArgs(port, run, addr, extra);
  };
  // Node A hosts the server: B starts once A listens on the port.
  NodeProc a = StartNode(dir, "a", args("127.0.0.1", "train1", {"--steps=1000000"}), env);
  REQUIRE(WaitFor([&] { return meshrun::PortInUse("127.0.0.1", port); }, 20));
  NodeProc b = StartNode(dir, "b", args("127.0.0.2", "train1", {"--steps=1000000"}), env);
  // Training runs: rank 0 (node A) has logged a few steps.
  const bool training = WaitFor([&] { return Contains(a.out(), "rank=0 step=15 "); }, 180, 0.1);
  INFO(a.out() << a.err() << "\n----\n" << b.out() << b.err());
  REQUIRE(training);
  CHECK(Contains(a.out(), "training on 4 rank(s), backend gloo, restart count 0"));
  CHECK_FALSE(std::filesystem::exists(ckpt + "/checkpoint.pt"));  // --checkpoint_every=0: none yet.
  kill(b.pid, SIGTERM);
  CHECK(WaitFor([&] { return Contains(b.err(), "received SIGTERM; stopping workers"); }, 20));
  kill(a.pid, SIGTERM);
  a.code = WaitCommand(a.pid, 60);
  b.code = WaitCommand(b.pid, 60);
  INFO("after SIGTERM:\n" << a.out() << a.err() << "\n----\n" << b.out() << b.err());
  CHECK(a.code == 143);
  CHECK(b.code == 143);
  const int saved = NumberAfter(a.out(), "checkpoint saved at step ");
  CHECK(saved >= 15);
  CHECK(Contains(a.out(), "checkpoint saved at step " + std::to_string(saved) + " (SIGTERM)"));
  CHECK(Contains(a.out(), "stopped by SIGTERM at step " + std::to_string(saved)));
  REQUIRE(std::filesystem::exists(ckpt + "/checkpoint.pt"));
  // The file holds that step (read back by PyTorch itself).
  RunResult step = RunCommand(
      {py, "-c", "import sys, torch; print('STEP', torch.load(sys.argv[1])['step'])", ckpt + "/checkpoint.pt"}, {}, 120);
  CHECK(Contains(step.out, "STEP " + std::to_string(saved) + "\n"));

  // 2. A new job (as a requeued one) resumes there and finishes 20 steps on.
  port = FreePort();
  const std::string target = "--steps=" + std::to_string(saved + 20);
  NodeProc a2 = StartNode(dir, "a2", args("127.0.0.1", "train2", {target}), env);
  NodeProc b2 = StartNode(dir, "b2", args("127.0.0.2", "train2", {target}), env);
  a2.code = WaitCommand(a2.pid, 240);
  b2.code = WaitCommand(b2.pid, 240);
  INFO(a2.out() << a2.err() << "\n----\n" << b2.out() << b2.err());
  CHECK(a2.code == 0);
  CHECK(b2.code == 0);
  CHECK(Contains(a2.out(), "resumed from step " + std::to_string(saved) + " (restart count 0)"));
  CHECK(Contains(a2.out(), "done: " + std::to_string(saved + 20) + " steps"));
  CHECK(CountOccurrences(a2.out(), "rank=0 step=") <= 4);  // 20 steps logged every 5: it did not start over.
}

TEST_CASE("examples/train.py: a failed worker is restarted by meshrun and resumes from the last checkpoint",
          "[e2e][torch][example]") {
  std::string py = TorchPython();
  if (py.empty()) MESHRUN_SKIP("no python3 with torch (install python3-torch)");
  const std::string dir = TempDir();
  // Rank 1 fails at step 25 of the first attempt; checkpoints every 10
  // steps: the restarted workers go on from step 20.
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", "--max_restarts=1",
                            SourceDir() + "/examples/train.py", "--checkpoint_dir=" + dir + "/ckpt", "--steps=40",
                            "--checkpoint_every=10", "--log_every=10", "--fail_at_step=25"},
                           {{"PYTHON_EXEC", py}}, 240);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.out, "rank=1 failing on purpose at step 25"));
  CHECK(Contains(r.err, "restart 1 of 1"));
  CHECK(Contains(r.out, "training on 2 rank(s), backend gloo, restart count 1"));
  CHECK(Contains(r.out, "resumed from step 20 (restart count 1)"));
  CHECK(Contains(r.out, "done: 40 steps"));
}

TEST_CASE("examples/train.py: SIGUSR1 (Slurm's time-limit notice) saves a checkpoint and training goes on",
          "[e2e][torch][example]") {
  std::string py = TorchPython();
  if (py.empty()) MESHRUN_SKIP("no python3 with torch (install python3-torch)");
  const std::string dir = TempDir();
  NodeProc n = StartNode(dir, "n", {"--standalone", "--nproc_per_node=2", SourceDir() + "/examples/train.py",
                                    "--checkpoint_dir=" + dir + "/ckpt", "--steps=1000000", "--checkpoint_every=0",
                                    "--log_every=5"},
                         {{"PYTHON_EXEC", py}});
  const bool training = WaitFor([&] { return Contains(n.out(), "rank=0 step=10 "); }, 180, 0.1);
  INFO(n.out() << n.err());
  REQUIRE(training);
  kill(n.pid, SIGUSR1);  // meshrun passes it on to every worker.
  const bool saved = WaitFor([&] { return Contains(n.out(), " (SIGUSR1): "); }, 60, 0.1);
  const int at = NumberAfter(n.out(), "checkpoint saved at step ");
  // Training goes on past the save (20 steps more are logged).
  const bool going_on = WaitFor([&] { return Contains(n.out(), "rank=0 step=" + std::to_string((at / 5 + 4) * 5) + " "); },
                                60, 0.1);
  kill(n.pid, SIGTERM);
  n.code = WaitCommand(n.pid, 60);
  INFO(n.out() << n.err());
  CHECK(saved);
  CHECK(at >= 10);
  CHECK(going_on);
  CHECK(n.code == 143);
  CHECK(Contains(n.out(), "(SIGTERM): "));
  CHECK(std::filesystem::exists(dir + "/ckpt/checkpoint.pt"));
}
