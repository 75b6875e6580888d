// Stopping workers end to end (docs/design.md §4a): the stop signal reaches each
// worker's main process first, helpers are killed after the grace; nohup's
// SIGHUP stays ignored; SIGUSR1 reaches workers by default; what workers
// leave behind is stopped at the end of the job. Real processes, loopback.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/e2e/e2e_util.h"
#include "tests/support/skip.h"

using namespace meshrun::testing;

namespace {

// Every "<tag>=<pid>[,<pid>...]" in `text`.
std::vector<pid_t> PidsAfter(const std::string& text, const std::string& tag) {
  std::vector<pid_t> out;
  std::regex re(tag + "=([0-9,]+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    for (absl::string_view p : absl::StrSplit((*it)[1].str(), ',', absl::SkipEmpty())) {
      out.push_back(std::stoi(std::string(p)));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("SIGTERM goes to the main process first: helpers live through its handler and die after", "[e2e][signals]") {
  std::string dir = TempDir();
  // The main process keeps a helper in its group and one that left it
  // (setsid); its TERM handler checks the helper is still alive, then exits.
  std::string script = WriteScript(dir, "main.sh",
      "sleep 300 & H=$!\n"
      "setsid sleep 301 & S=$!\n"
      "trap 'sleep 0.3; kill -0 $H && echo \"HELPER ALIVE AT TERM $RANK\"; exit 0' TERM\n"
      "echo \"helpers=$H,$S\"\n"
      "while :; do sleep 0.05; done");
  NodeProc n = StartNode(dir, "n", {"--standalone", "--nproc_per_node=2", "--shutdown_timeout=5", script});
  REQUIRE(WaitFor([&] { return PidsAfter(n.out(), "helpers").size() == 4; }, 10));
  kill(n.pid, SIGTERM);
  CHECK(WaitCommand(n.pid, 20) == 143);
  INFO(n.out() << n.err());
  CHECK(CountOccurrences(n.out(), "HELPER ALIVE AT TERM") == 2);
  for (pid_t p : PidsAfter(n.out(), "helpers")) {
    CHECK(WaitFor([&] { return !Alive(p); }, 3));
  }
}

TEST_CASE("a trainer that checkpoints on SIGTERM with 2 DataLoader workers saves on every rank", "[e2e][signals][torch]") {
  std::string py = TorchPython();
  if (py.empty()) MESHRUN_SKIP("no python3 with torch (install python3-torch)");
  std::string dir = TempDir();
  NodeProc n = StartNode(dir, "n", {"--standalone", "--nproc_per_node=2", "--shutdown_timeout=30",
                                    SourceDir() + "/tests/py/checkpoint_on_sigterm.py", dir},
                         {{"PYTHON_EXEC", py}});
  REQUIRE(WaitFor([&] { return CountOccurrences(n.out(), "READY rank=") == 2; }, 120));
  std::vector<pid_t> loaders = PidsAfter(n.out(), "loader_pids");
  REQUIRE(loaders.size() == 4);
  kill(n.pid, SIGTERM);
  CHECK(WaitCommand(n.pid, 60) == 143);
  INFO(n.out() << n.err());
  CHECK(CountOccurrences(n.out(), "SAVED rank=") == 2);
  CHECK(std::filesystem::exists(dir + "/ckpt_rank0.pt"));
  CHECK(std::filesystem::exists(dir + "/ckpt_rank1.pt"));
  for (pid_t p : loaders) CHECK(WaitFor([&] { return !Alive(p); }, 3));
}

TEST_CASE("started with SIGHUP ignored (nohup): SIGHUP changes nothing and the job ends 0", "[e2e][signals]") {
  std::string dir = TempDir();
  std::string go = dir + "/go";
  // Each worker reports whether SIGHUP is ignored in it (SigIgn bit 0).
  std::string script = WriteScript(dir, "hup.sh",
      "ign=$(awk '/^SigIgn/ {print $2}' /proc/self/status)\n"
      "echo \"ready $RANK sigign=$ign\"\n"
      "while [ ! -e " + go + " ]; do sleep 0.05; done\nexit 0");
  // nohup ignores SIGHUP, then execs meshrun.
  NodeProc n;
  n.out_path = dir + "/n.out";
  n.err_path = dir + "/n.err";
  n.pid = StartCommand({"/usr/bin/nohup", MeshrunBinary(), "--standalone", "--nproc_per_node=2", script}, {},
                       n.out_path, n.err_path);
  REQUIRE(WaitFor([&] { return CountOccurrences(n.out(), "ready ") == 2; }, 10));
  // awk's SigIgn is a hex mask; SIGHUP is its lowest bit.
  std::regex re("sigign=([0-9a-f]+)");
  std::string out = n.out();
  int seen = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it) {
    std::string mask = (*it)[1].str();
    CHECK((std::stoul(mask.substr(mask.size() - 1), nullptr, 16) & 1) == 1);
    ++seen;
  }
  CHECK(seen == 2);
  kill(n.pid, SIGHUP);
  usleep(300000);
  CHECK(Alive(n.pid));
  std::ofstream(go) << "1";
  CHECK(WaitCommand(n.pid, 20) == 0);
  INFO(n.err());
  CHECK_FALSE(Contains(n.err(), "received SIGHUP"));
}

TEST_CASE("SIGUSR1 with the default flags reaches every worker's handler and the job goes on", "[e2e][signals]") {
  std::string dir = TempDir();
  std::string go = dir + "/go";
  std::string script = WriteScript(dir, "usr1.sh",
      "trap 'echo \"USR1 at $RANK\"' USR1\necho \"ready $RANK\"\n"
      "while [ ! -e " + go + " ]; do sleep 0.05; done\nexit 0");
  NodeProc n = StartNode(dir, "n", {"--standalone", "--nproc_per_node=3", script});
  REQUIRE(WaitFor([&] { return CountOccurrences(n.out(), "ready") == 3; }, 10));
  kill(n.pid, SIGUSR1);
  CHECK(WaitFor([&] { return CountOccurrences(n.out(), "USR1 at") == 3; }, 10));
  CHECK(Alive(n.pid));
  std::ofstream(go) << "1";
  CHECK(WaitCommand(n.pid, 20) == 0);
}

TEST_CASE("what a worker leaves behind (sleep 1000 &, exit 0) is stopped when the job ends", "[e2e][signals]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "leave.sh", "sleep 1000 &\necho \"orphan=$!\"\nexit 0");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", script}, {}, 30);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.err, "meshrun: stopped 2 processes left behind by the workers"));
  std::vector<pid_t> orphans = PidsAfter(r.out, "orphan");
  REQUIRE(orphans.size() == 2);
  for (pid_t p : orphans) CHECK(WaitFor([&] { return !Alive(p); }, 3));
}

TEST_CASE("keep_orphans leaves them running and says so", "[e2e][signals]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "leave.sh", "sleep 1000 &\necho \"orphan=$!\"\nexit 0");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--keep-orphans", script}, {}, 30);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.err, "left 1 process started by the workers running (--keep_orphans)"));
  std::vector<pid_t> orphans = PidsAfter(r.out, "orphan");
  REQUIRE(orphans.size() == 1);
  CHECK(Alive(orphans[0]));
  kill(orphans[0], SIGKILL);
}

TEST_CASE("a restart stops the helpers of the failed round", "[e2e][signals]") {
  std::string dir = TempDir();
  // Round 0: a helper left behind by a worker that then fails; round 1 succeeds.
  std::string script = WriteScript(dir, "r.sh",
      "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then setsid sleep 500 & echo \"helper=$!\"; sleep 0.2; exit 3; fi\n"
      "exit 0");
  RunResult r = RunCommand({MeshrunBinary(), "--standalone", "--max_restarts=1", "--shutdown_timeout=2", script}, {}, 30);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  std::vector<pid_t> helpers = PidsAfter(r.out, "helper");
  REQUIRE(helpers.size() == 1);
  CHECK_FALSE(Alive(helpers[0]));
}

TEST_CASE("a SIGKILLed meshrun: the shim stops the worker and a helper that left its group", "[e2e][signals]") {
  std::string dir = TempDir();
  std::string script = WriteScript(dir, "k.sh",
      "setsid sleep 302 & echo \"helper=$!\"\nwhile :; do sleep 0.05; done");
  NodeProc n = StartNode(dir, "n", {"--standalone", "--shutdown_timeout=1", script});
  REQUIRE(WaitFor([&] { return PidsAfter(n.out(), "helper").size() == 1; }, 10));
  pid_t helper = PidsAfter(n.out(), "helper")[0];
  REQUIRE(Alive(helper));
  kill(n.pid, SIGKILL);
  WaitCommand(n.pid, 10);
  CHECK(WaitFor([&] { return !Alive(helper); }, 5));
  if (Alive(helper)) kill(helper, SIGKILL);
}
