// The open-files limit: what a meshrun needs, the warning, and raising it
// for real in this process (the soft limit goes up to the hard one).
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/open_files.h"

using namespace meshrun;
using Catch::Contains;

TEST_CASE("descriptors needed: one per agent connection plus a few per worker and a margin", "[open_files]") {
  CHECK(DescriptorsNeeded(0, 0) == 64);
  CHECK(DescriptorsNeeded(1000, 0) == 1064);
  CHECK(DescriptorsNeeded(10000, 8) == 10000 + 32 + 64);
  CHECK(DescriptorsNeeded(-5, -1) == 64);  // Nonsense counts as none.
}

TEST_CASE("the open-files warning names the limit, the need and how to raise it, and is empty when enough", "[open_files]") {
  OpenFilesLimit l;
  l.soft = 1024;
  l.hard = 1024;
  const std::string w = OpenFilesWarning(l, DescriptorsNeeded(2000, 8), "a run with --nnodes MAX=2000");
  CHECK_THAT(w, Contains("ulimit -n) is 1024 (hard limit 1024)"));
  CHECK_THAT(w, Contains("a run with --nnodes MAX=2000 needs about 2096 descriptors"));
  CHECK_THAT(w, Contains("ulimit -Hn"));
  CHECK_THAT(w, Contains("LimitNOFILE="));
  CHECK(w.find('\n') == std::string::npos);
  l.soft = 4096;
  CHECK(OpenFilesWarning(l, 2096, "x").empty());
  l.hard = UINT64_MAX;
  l.soft = 10;
  CHECK_THAT(OpenFilesWarning(l, 64, "x"), Contains("(hard limit unlimited)"));
}

TEST_CASE("raising the open-files limit sets soft to hard and remembers the starting figure", "[open_files]") {
  rlimit rl{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0);
  const rlimit original = rl;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 64) return;  // Nothing to try it with.
  // Start below the hard limit, as a login shell's 1024 would.
  rl.rlim_cur = 64;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &rl) == 0);
  absl::StatusOr<OpenFilesLimit> raised = RaiseOpenFilesLimit();
  REQUIRE(raised.ok());
  CHECK(raised->soft_at_start <= 64);  // 64, or a figure from an earlier raise in this process.
  CHECK(raised->soft > 64);
  REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0);
  CHECK(static_cast<uint64_t>(rl.rlim_cur) == raised->soft);
  if (original.rlim_max != RLIM_INFINITY) CHECK(raised->soft == static_cast<uint64_t>(original.rlim_max));
  CHECK(OpenFilesSoftLimitAtStart() == raised->soft_at_start);
  absl::StatusOr<OpenFilesLimit> now = CurrentOpenFilesLimit();
  REQUIRE(now.ok());
  CHECK(now->soft == raised->soft);
  CHECK(now->soft_at_start == raised->soft_at_start);
  // What a worker gets between fork and exec.
  pid_t pid = fork();
  if (pid == 0) {
    RestoreOpenFilesLimitInChild();
    rlimit child{};
    getrlimit(RLIMIT_NOFILE, &child);
    _exit(child.rlim_cur == OpenFilesSoftLimitAtStart() ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &original) == 0);
}

TEST_CASE("free descriptors are counted by taking them, and given back", "[open_files]") {
  const int64_t open_before = OpenDescriptorCount();
  REQUIRE(open_before > 0);
  CHECK(FreeDescriptors(16) == 16);
  CHECK(OpenDescriptorCount() == open_before);
  // At a limit just above what is open, only that many are free.
  rlimit original{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &original) == 0);
  rlimit tight = original;
  tight.rlim_cur = static_cast<rlim_t>(open_before + 40);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &tight) == 0);
  const int64_t free = FreeDescriptors(1000);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &original) == 0);
  // 40, and as many more as open descriptors are numbered above the limit.
  CHECK(free >= 40);
  CHECK(free < 1000);
}
