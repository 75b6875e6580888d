#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "agent/process_tree.h"

using namespace meshrun::agent;

TEST_CASE("proc stat lines parse, command names with spaces and parentheses too", "[process_tree]") {
  auto p = ParseProcStat("4242 (my (odd) prog) S 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 0 0");
  REQUIRE(p.has_value());
  CHECK(p->pid == 4242);
  CHECK(p->state == 'S');
  CHECK(p->ppid == 17);
  CHECK(p->pgid == 4242);
  CHECK(p->start_time == 98765);
  CHECK_FALSE(ParseProcStat("garbage").has_value());
  CHECK_FALSE(ParseProcStat("12 (x) S 1 2").has_value());  // Cut short.
}

TEST_CASE("descendants: the whole subtree, zombies and other trees left out", "[process_tree]") {
  std::vector<ProcInfo> t = {
      {1, 0, 1, 'S', 1},   {10, 1, 10, 'S', 2}, {11, 10, 11, 'S', 3}, {12, 11, 12, 'S', 4},  // 12 left the group.
      {13, 10, 10, 'Z', 5}, {20, 1, 20, 'S', 6}, {21, 20, 20, 'S', 7}};
  std::vector<pid_t> d = Descendants(t, 10);
  std::sort(d.begin(), d.end());
  CHECK(d == std::vector<pid_t>{11, 12});
  CHECK(Descendants(t, 12).empty());
  CHECK(GroupMembers(t, 20) == std::vector<pid_t>{20, 21});
  CHECK(GroupMembers(t, 10) == std::vector<pid_t>{10});  // 13 is a zombie.
}

TEST_CASE("StopDescendants reaches a grandchild that left the group, after the grace", "[process_tree]") {
  // A child that ignores SIGTERM and starts a grandchild in a new session.
  pid_t child = fork();
  if (child == 0) {
    signal(SIGTERM, SIG_IGN);
    if (fork() == 0) {
      setsid();
      execl("/bin/sleep", "sleep", "30", nullptr);
      _exit(1);
    }
    for (;;) pause();
  }
  std::vector<pid_t> below;
  for (int i = 0; i < 200 && below.size() < 2; ++i) {
    below = Descendants(ReadProcessTable(), getpid());
    usleep(10000);
  }
  REQUIRE(below.size() == 2);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(StopDescendants(getpid(), SIGTERM, std::chrono::milliseconds(300)) == 2);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(300));  // The child ignored SIGTERM.
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  // The grandchild (reparented to init: SIGKILLed in the same pass) is
  // gone too, once the kernel has delivered the signal (bounded wait).
  auto alive = [&](pid_t p) {
    std::vector<ProcInfo> table = ReadProcessTable();
    return std::any_of(table.begin(), table.end(), [&](const ProcInfo& i) { return i.pid == p && i.state != 'Z'; });
  };
  for (pid_t p : below) {
    for (int i = 0; i < 100 && alive(p); ++i) usleep(10000);
    CHECK_FALSE(alive(p));
  }
}
