// The process tree under a process, read from /proc: what a stop must reach
// after the grace period (a worker's helpers that left its process group,
// orphans reparented to a child subreaper). Plain C++ and POSIX only, so that
// meshrun-worker-shim can use it too (docs/design.md §4a).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshrun::agent {

// One line of /proc/<pid>/stat, the fields a tree walk needs.
struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  char state = '?';                  // 'R', 'S', 'Z' (zombie), ...
  unsigned long long start_time = 0; // Clock ticks since boot; tells a reused pid apart.
};

// Parses the text of /proc/<pid>/stat (the command name may hold spaces and
// parentheses: the fields after the last ')' are read). nullopt when the text
// is not a stat line. Pure; thread-safe.
std::optional<ProcInfo> ParseProcStat(std::string_view stat);

// Every process visible in /proc right now (processes that vanish during the
// scan are skipped). Thread-safe; takes O(processes) system calls.
std::vector<ProcInfo> ReadProcessTable();

// The pids below `root` in `table` (children, their children, ...), `root`
// excluded, zombies excluded (they are dead already). Pure; thread-safe.
std::vector<pid_t> Descendants(const std::vector<ProcInfo>& table, pid_t root);

// The live (non-zombie) members of process group `pgid` in `table`. Pure.
std::vector<pid_t> GroupMembers(const std::vector<ProcInfo>& table, pid_t pgid);

// Sends `signo` to every live descendant of `root` (read from /proc now),
// through a pidfd checked against the process's start time, so a pid reused
// in between is never signalled. Returns how many were signalled.
// Async-signal-unsafe (allocates); call from a normal thread.
int SignalDescendants(pid_t root, int signo);

// Stops everything below `root`: `first_signal` (0: skip to SIGKILL), then
// up to `grace` for them to exit, then SIGKILL for those left, repeated
// (bounded: at most 2 s more) until nothing is left, since a dying process's
// children may appear below `root` only after it is gone. Returns how many
// processes were found at the start. A caller that is not `root`'s reaper
// must reap on its own (the agent's signal thread does). Waits by polling
// /proc every 20 ms at most: bounded by grace + 2 s.
int StopDescendants(pid_t root, int first_signal, std::chrono::milliseconds grace);

}  // namespace meshrun::agent
