// The load processes of one rdzv_scale run: each simulates a slice of the
// agents (child.h), commanded one line at a time over a socket pair that is
// its stdin and stdout, and answers one ChildResult line per command.
#pragma once

#include <sys/types.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/rdzv_scale/driver.h"

namespace meshrun::bench {

// One load process: a slice of the agents, commanded over a socket pair
// that is its stdin and stdout.
struct LoadProc {
  pid_t pid = -1;
  int fd = -1;
  std::string buffer;
  std::string log;
  ~LoadProc() {
    if (fd >= 0) close(fd);
    if (pid > 0) {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (pgid > 0) UntrackProcessGroup(pgid);
  }
  pid_t pgid = -1;
};

// The last `bytes` bytes of the file at `path` (for error messages).
std::string Tail(const std::string& path, size_t bytes = 1500);
// Starts one load process for the agents `c` describes, its log at `log`,
// tracked for KillChildrenOnSignal. Does not wait: its first line (ReadLines)
// says it is ready.
absl::Status SpawnLoad(const DriverOptions& o, const SimConfig& c, const std::string& log, LoadProc* p);
// Reads one line from each process, all bounded by `deadline`.
absl::StatusOr<std::vector<std::string>> ReadLines(std::vector<std::unique_ptr<LoadProc>>& procs, absl::Time deadline);
// Sends `command` to every load process and reads each one's answer line.
absl::StatusOr<std::vector<std::string>> CommandAll(std::vector<std::unique_ptr<LoadProc>>& procs,
                                                    const std::string& command, absl::Time deadline);
// Sends "workersprep" to every load process and waits for all: each starts
// its agents' store proxies and plans its workers' requests. OK when every
// one of `expected` workers is ready.
absl::Status PrepareWorkers(std::vector<std::unique_ptr<LoadProc>>& procs, int64_t expected, absl::Duration timeout);

}  // namespace meshrun::bench
