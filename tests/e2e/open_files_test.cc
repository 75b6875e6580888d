// The open-files limit at start: meshrun raises its own soft limit to the
// hard one, its workers get the limit it was started with, and a limit too
// low for --nnodes MAX is warned about (by the hosting meshrun at start,
// by a daemon at the join that asks for it).
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include "tests/e2e/e2e_util.h"

using namespace meshrun::testing;

namespace {

// `argv` under a shell that sets the open-files limit first: `limits` is
// what goes after `ulimit` ("-Sn 512", "-n 512").
std::vector<std::string> Limited(const std::string& limits, std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"/bin/sh", "-c", "ulimit " + limits + " && exec \"$0\" \"$@\""});
  return argv;
}

}  // namespace

TEST_CASE("meshrun raises its own open-files limit, and its workers get the one it started with",
          "[e2e][open_files]") {
  std::string dir = TempDir();
  // Soft 512 under a higher hard limit, as a login shell's 1024.
  const std::string script = WriteScript(dir, "w.sh", "echo \"WORKER_NOFILE $(ulimit -Sn)\"");
  RunResult r = RunCommand(Limited("-Sn 512", {MeshrunBinary(), "--standalone", "--nproc_per_node=2", script}),
                           {{"MESHRUN_LOG_LEVEL", "debug"}}, 60);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(CountLines(r.out, "WORKER_NOFILE 512") == 2);
  CHECK(Contains(r.err, "open files limit: soft "));
  CHECK(Contains(r.err, "(was 512)"));
  CHECK_FALSE(Contains(r.err, "open files limit (ulimit -n)"));  // Enough for one node.
}

TEST_CASE("a limit too low for --nnodes MAX is warned about: at start when hosting, at the join by a daemon",
          "[e2e][open_files]") {
  std::string dir = TempDir();
  const int port = FreePort();
  // Hosting, 512 soft and hard: MAX 2000 agents need about 2000 + 64.
  RunResult hosted = RunCommand(
      Limited("-n 512", {MeshrunBinary(), "--nnodes=1:2000", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                         "--rdzv_id=big", "--rdzv_conf=last_call_timeout=0.2", "/bin/true"}),
      {}, 60);
  INFO(hosted.out << hosted.err);
  CHECK(hosted.exit_code == 0);
  CHECK(CountLines(hosted.err, "meshrun: warning: the open files limit (ulimit -n) is 512 (hard limit 512) but the "
                               "rendezvous server for --nnodes MAX=2000 with this node's 1 worker(s) needs about "
                               "2068 descriptors") == 1);

  // A daemon with 512 says so when a run asks for 2000 nodes, once.
  const std::string port_file = dir + "/port";
  pid_t daemon = StartCommand(Limited("-n 512", {MeshrunBinary(), "server", "--host", "127.0.0.1", "--port", "0",
                                                 "--port_file", port_file}),
                              {}, dir + "/server.out", dir + "/server.err");
  for (int i = 0; i < 250 && ReadFile(port_file).empty(); ++i) usleep(20000);
  REQUIRE_FALSE(ReadFile(port_file).empty());
  const std::string endpoint = "--rdzv_endpoint=127.0.0.1:" + std::to_string(std::stoi(ReadFile(port_file)));
  for (const char* id : {"one", "two"}) {
    RunResult r = RunCommand({MeshrunBinary(), "--nnodes=1:2000", endpoint, std::string("--rdzv_id=") + id, "--rdzv_conf=is_host=0,last_call_timeout=0.2",
                              "/bin/true"},
                             {}, 60);
    CHECK(r.exit_code == 0);
    CHECK_FALSE(Contains(r.err, "open files limit"));  // Not hosting: 64 + 4 is enough.
  }
  kill(daemon, SIGTERM);
  CHECK(WaitCommand(daemon, 10) == 0);
  const std::string err = ReadFile(dir + "/server.err");
  INFO(err);
  CHECK(CountLines(err, "warning: the open files limit (ulimit -n) is 512 (hard limit 512) but a run with a node "
                        "count (MAX) of 2000 needs about 2064 descriptors") == 1);
}
