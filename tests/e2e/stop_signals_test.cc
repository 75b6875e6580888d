// Stop signals that torchrun 2.x obeys and meshrun must too: SIGINT of a
// meshrun started in the background of a script (which runs it with SIGINT
// ignored), and SIGTERM/SIGINT while meshrun still waits for its server.
#include <catch2/catch.hpp>

#include <signal.h>

#include <regex>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "tests/e2e/e2e_util.h"

using namespace meshrun::testing;

namespace {

// The SigIgn masks ("sigign=<hex>") a set of processes printed.
std::vector<uint64_t> IgnoredMasks(const std::string& out) {
  std::vector<uint64_t> masks;
  std::regex re("sigign=([0-9a-f]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it) {
    uint64_t m = 0;
    if (absl::SimpleHexAtoi((*it)[1].str(), &m)) masks.push_back(m);
  }
  return masks;
}

constexpr uint64_t kSigintBit = 1ULL << (SIGINT - 1);

}  // namespace

TEST_CASE("kill -INT of a meshrun started with & from a script stops the job with 130, as torchrun 2.x",
          "[e2e][signals]") {
  std::string dir = TempDir();
  std::string worker = WriteScript(dir, "w.sh",
                                   "echo \"ready $RANK sigign=$(awk '/^SigIgn/ {print $2}' /proc/$$/status)\"\n"
                                   "exec sleep 60");
  // A script's background jobs run with SIGINT and SIGQUIT ignored (POSIX,
  // no job control): the sibling shows it, then meshrun is started the same way.
  std::string sibling = WriteScript(dir, "sibling.sh",
                                    "echo \"sibling sigign=$(awk '/^SigIgn/ {print $2}' /proc/$$/status)\"");
  std::string runner = WriteScript(dir, "runner.sh",
                                   sibling + " &\nwait $!\n" + MeshrunBinary() + " --standalone --nproc_per_node=2 " +
                                       worker + " &\necho \"meshrun=$!\"\nwait $!\necho \"rc=$?\"");
  NodeProc r;
  r.out_path = dir + "/runner.out";
  r.err_path = dir + "/runner.err";
  r.pid = StartCommand({runner}, {}, r.out_path, r.err_path);
  REQUIRE(WaitFor([&] { return CountOccurrences(r.out(), "ready ") == 2; }, 20));
  INFO(r.out() << r.err());
  std::vector<uint64_t> masks = IgnoredMasks(r.out());
  REQUIRE(masks.size() == 3);
  CHECK((masks[0] & kSigintBit) != 0);  // The premise: the script's background job ignores SIGINT.
  CHECK((masks[1] & kSigintBit) == 0);  // meshrun's workers start with the default action.
  CHECK((masks[2] & kSigintBit) == 0);
  std::smatch m;
  std::string out = r.out();
  REQUIRE(std::regex_search(out, m, std::regex("meshrun=([0-9]+)")));
  const pid_t meshrun = std::stoi(m[1].str());
  const absl::Time sent = absl::Now();
  REQUIRE(kill(meshrun, SIGINT) == 0);
  REQUIRE(WaitFor([&] { return Contains(r.out(), "rc="); }, 20));
  const absl::Duration took = absl::Now() - sent;
  INFO(r.out() << r.err());
  CHECK(Contains(r.out(), "rc=130"));
  if (kTimingBounds) CHECK(took < absl::Seconds(2));
  CHECK(WaitCommand(r.pid, 10) == 0);
}

TEST_CASE("a stop signal while meshrun waits for its server (is_host=0, nothing listening) ends it at once with 128+n",
          "[e2e][signals]") {
  for (int signo : {SIGTERM, SIGINT}) {
    DYNAMIC_SECTION("signal " << signo) {
      std::string dir = TempDir();
      const int port = FreePort();  // Nothing listens there.
      NodeProc n = StartNode(dir, "n",
                             {"--nnodes=2", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port), "--rdzv_id=waiting",
                              "--rdzv_conf=is_host=0,read_timeout=120", "true"},
                             {{"MESHRUN_LOG_LEVEL", "debug"}});
      // The state: meshrun's first attempt was refused and it waits.
      REQUIRE(WaitFor([&] { return Contains(n.err(), "waiting for the rendezvous server at 127.0.0.1:"); }, 20));
      const absl::Time sent = absl::Now();
      REQUIRE(kill(n.pid, signo) == 0);
      const int code = WaitCommand(n.pid, 20);
      const absl::Duration took = absl::Now() - sent;
      INFO(n.err());
      CHECK(code == 128 + signo);
      CHECK(Contains(n.err(), "while waiting for the rendezvous server; exiting"));
      if (kTimingBounds) CHECK(took < absl::Seconds(1));
    }
  }
}

TEST_CASE("a job stopped everywhere at once: a node that loses its server first still gives its workers their grace",
          "[e2e][signals]") {
  // scancel and a pod deletion send SIGTERM to every node together; the
  // node that hosts the server stops serving at once, so another node may
  // see its server go before its own SIGTERM arrives. That SIGTERM must not
  // cut its workers' checkpoint short (it is not a second signal).
  std::string dir = TempDir();
  const int port = FreePort();
  std::string script = WriteScript(dir, "ckpt.sh",
                                   "trap 'sleep 1; echo \"saved $RANK\"; exit 0' TERM\n"
                                   "echo \"ready $RANK\"\nwhile true; do sleep 0.05; done");
  auto node = [&](const std::string& name, const std::string& addr) {
    return StartNode(dir, name,
                     {"--nnodes=2", "--nproc_per_node=1", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                      "--rdzv_id=everywhere", "--local_addr=" + addr, script},
                     {{"MESHRUN_LOG_LEVEL", "info"}});
  };
  NodeProc a = node("a", "127.0.0.1");
  REQUIRE(WaitFor([&] { return Contains(a.err(), "hosting the rendezvous server on port"); }, 20));
  NodeProc b = node("b", "127.0.0.2");
  REQUIRE(WaitFor([&] { return CountOccurrences(a.out() + b.out(), "ready ") == 2; }, 30));
  REQUIRE(kill(a.pid, SIGTERM) == 0);
  // The state: node b saw its server go and is stopping its workers.
  REQUIRE(WaitFor([&] { return Contains(b.err(), "stopping this node's workers"); }, 30));
  REQUIRE(kill(b.pid, SIGTERM) == 0);
  const int code_b = WaitCommand(b.pid, 60);
  const int code_a = WaitCommand(a.pid, 60);
  INFO(a.err() << b.err());
  CHECK(code_a == 143);
  CHECK(code_b == 143);
  CHECK(Contains(b.out(), "saved 1"));  // Its worker saved: not killed at the second signal.
  CHECK(Contains(a.out(), "saved 0"));
  CHECK(Contains(b.err(), "received SIGTERM meanwhile: stopped this node's workers"));
}
