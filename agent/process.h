// Worker processes: spawning with process hygiene (docs/design.md §4a), signalling
// process groups, naming exit statuses, and the agent's signal thread.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace meshrun::agent {

// A started child: its pid, which is also its process group and session id.
struct Child {
  pid_t pid = -1;
  // Read end of a close-on-exec pipe: EOF means exec succeeded; 4 bytes
  // mean exec failed with that errno. Closed by CheckExec.
  int exec_fd = -1;
};

// CPUs and NUMA nodes (OS indices) a worker is bound to (--numa_binding);
// both empty: no binding.
struct CpuBinding {
  std::vector<int> cpus;
  std::vector<int> mem_nodes;
};

// Forks and execs `argv` with environment `envp` ("K=V" strings) in a new
// session (setsid: its own process group and scheduler autogroup, as
// torchrun's workers), returning once that session exists, with PR_SET_PDEATHSIG=SIGKILL tied to the calling
// thread (so call it from one long-lived thread), the signal mask cleared, and
// only async-signal-safe calls between fork and exec. `argv[0]` is run as is
// (execve; resolve it against PATH first). stdout/stderr are inherited unless
// `stdout_fd`/`stderr_fd` are >= 0, then dup2'ed onto 1 and 2. With
// `all_signals_blocked` the child starts with every signal blocked instead
// (meshrun-worker-shim takes them with sigwaitinfo: no window in which a
// forwarded signal could kill it). SIGPIPE gets its default action back
// (gRPC ignores it in meshrun) unless it was ignored when meshrun started
// (signal_policy.h); other dispositions are inherited as they are. With
// `binding` the child binds itself before exec: sched_setaffinity to its
// CPUs and set_mempolicy(MPOL_BIND) to its NUMA nodes (inherited by exec
// and by the worker's children); a failure is written to its stderr as a
// warning and the worker runs unbound.
// Returns at once; call CheckExec to learn whether exec succeeded.
absl::StatusOr<Child> Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& envp,
                            int stdout_fd = -1, int stderr_fd = -1, bool all_signals_blocked = false,
                            const CpuBinding* binding = nullptr);

// Waits until `child` has exec'ed (OK) or failed to (the errno as a status
// naming argv0). Closes child.exec_fd.
absl::Status CheckExec(Child& child, const std::string& argv0);

// "SIGSEGV" for 11, "SIG<n>" for unknown numbers.
std::string SignalName(int signo);
// Parses "SIGTERM", "TERM" or "15"; INVALID_ARGUMENT naming the value.
absl::StatusOr<int> ParseSignal(const std::string& text);

// The conventional exit code for a wait status: the exit code, or 128+n for
// a death by signal n.
int ExitCodeOf(int wait_status);
// "exit code 3" or "signal SIGSEGV (11)".
std::string DescribeWaitStatus(int wait_status);

// Blocks `signals` plus SIGCHLD in the calling thread; call in main() before
// any thread starts (gRPC's included), so every thread inherits the mask and
// only the signal thread receives them.
void BlockSignals(const std::vector<int>& signals);

// Resolves `program` against PATH like execvp does: a name containing '/' is
// checked as a path; else each PATH entry is tried. NOT_FOUND naming the
// program and the PATH searched; PERMISSION_DENIED when not executable.
absl::StatusOr<std::string> ResolveProgram(const std::string& program);

// One thread that receives the blocked signals through a signalfd: it calls
// on_signal(signo) for a forwarded signal and on_child_exit(pid, status) for
// every child reaped (waitpid(-1, WNOHANG) on SIGCHLD). Never a polling sleep.
class SignalThread {
 public:
  SignalThread(std::vector<int> signals, std::function<void(int)> on_signal,
               std::function<void(pid_t, int)> on_child_exit);
  ~SignalThread();  // Stops and joins.
  SignalThread(const SignalThread&) = delete;
  SignalThread& operator=(const SignalThread&) = delete;

  absl::Status Start();

 private:
  void Loop();

  std::vector<int> signals_;
  std::function<void(int)> on_signal_;
  std::function<void(pid_t, int)> on_child_exit_;
  int signal_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
};

}  // namespace meshrun::agent
