#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/process.h"

using namespace meshrun::agent;

TEST_CASE("signal names and exit codes", "[process]") {
  CHECK(SignalName(SIGSEGV) == "SIGSEGV");
  CHECK(SignalName(SIGTERM) == "SIGTERM");
  CHECK(*ParseSignal("SIGUSR1") == SIGUSR1);
  CHECK(*ParseSignal("term") == SIGTERM);
  CHECK(*ParseSignal("9") == 9);
  CHECK_FALSE(ParseSignal("SIGNOPE").ok());
  int exited3 = 3 << 8;
  CHECK(ExitCodeOf(exited3) == 3);
  CHECK(DescribeWaitStatus(exited3) == "exit code 3");
  int segv = SIGSEGV;
  CHECK(ExitCodeOf(segv) == 139);
  CHECK(DescribeWaitStatus(segv).find("SIGSEGV") != std::string::npos);
}

TEST_CASE("programs resolve against PATH with clear errors", "[process]") {
  auto sh = ResolveProgram("sh");
  REQUIRE(sh.ok());
  CHECK(sh->find("/sh") != std::string::npos);
  auto missing = ResolveProgram("definitely-not-a-program-xyz");
  REQUIRE(absl::IsNotFound(missing.status()));
  CHECK(std::string(missing.status().message()).find("definitely-not-a-program-xyz") != std::string::npos);
  CHECK(absl::IsNotFound(ResolveProgram("/no/such/file").status()));
  std::string plain = std::string(MESHRUN_BINARY_DIR) + "/CMakeCache.txt";
  CHECK_FALSE(ResolveProgram(plain).ok());  // Not executable.
}

TEST_CASE("spawned children run in their own session and process group and report exec failure", "[process]") {
  auto child = Spawn({"/bin/sh", "-c", "exit 7"}, {"PATH=/bin"});
  REQUIRE(child.ok());
  REQUIRE(CheckExec(*child, "/bin/sh").ok());
  pid_t pgid = getpgid(child->pid);
  CHECK((pgid == child->pid || pgid == -1));
  int status = 0;
  REQUIRE(waitpid(child->pid, &status, 0) == child->pid);
  CHECK(ExitCodeOf(status) == 7);

  // A session of its own (torchrun's start_new_session), made before Spawn returns.
  auto sleeper = Spawn({"/bin/sh", "-c", "sleep 30"}, {"PATH=/bin"});
  REQUIRE(sleeper.ok());
  CHECK(getsid(sleeper->pid) == sleeper->pid);
  CHECK(getpgid(sleeper->pid) == sleeper->pid);
  CHECK(getsid(sleeper->pid) != getsid(0));
  REQUIRE(CheckExec(*sleeper, "/bin/sh").ok());
  kill(sleeper->pid, SIGKILL);
  REQUIRE(waitpid(sleeper->pid, &status, 0) == sleeper->pid);

  auto bad = Spawn({"/no/such/binary"}, {});
  REQUIRE(bad.ok());
  absl::Status s = CheckExec(*bad, "/no/such/binary");
  CHECK(absl::IsNotFound(s));
  waitpid(bad->pid, &status, 0);
}

TEST_CASE("a spawned child with a binding runs on its CPUs only", "[process]") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const int cpu = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 1 : 0;
  CpuBinding binding{{cpu}, {0}};
  auto child = Spawn({"/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status"}, {"PATH=/bin:/usr/bin"}, fds[1], -1,
                     false, &binding);
  close(fds[1]);
  REQUIRE(child.ok());
  REQUIRE(CheckExec(*child, "/bin/sh").ok());
  std::string out;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(child->pid, &status, 0);
  CHECK(out == "Cpus_allowed_list:\t" + std::to_string(cpu) + "\n");
  CHECK(ExitCodeOf(status) == 0);
}
