// meshrun-worker-shim: the parent of every worker, so that nothing of a
// worker outlives its agent (docs/design.md §4a).
//
//   meshrun-worker-shim <grace_ms> -- prog args...
//
// The agent starts the shim as the leader of the worker's process group.
// The shim runs prog in that group and waits for it. When prog ends, the
// shim ends the same way (its exit code, or the same signal).
//
// Signals: a signal the agent sends to the shim itself is passed on to prog
// only (the worker's main process), never to its children: a trainer that
// catches SIGTERM can finish its step and save a checkpoint while its
// DataLoader workers still run. Signals from anyone else to the group reach
// prog directly; the shim blocks them and ignores its copy.
//
// When the agent dies (even by SIGKILL), the kernel signals the shim
// (parent-death signal): it sends SIGTERM to prog, waits up to grace_ms for
// it, then SIGKILLs everything below the shim and the whole group. The shim
// is a child subreaper, so helpers of prog that left the group (setsid) and
// lost their parent are still below it.
// Only async-signal-safe calls run between fork and exec.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>

#include "agent/process_tree.h"

namespace {

int ParentDeathSignal() { return SIGRTMIN + 1; }

[[noreturn]] void ExitLike(int status) {
  if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    sigprocmask(SIG_UNBLOCK, &one, nullptr);
    raise(sig);
    _exit(128 + sig);
  }
  _exit(1);
}

// Reaps every exited child (the shim is a subreaper: orphans of prog come
// here); true when prog itself was among them, its status in *status.
bool ReapAll(pid_t child, int* status) {
  bool prog_done = false;
  for (;;) {
    int st = 0;
    pid_t r = waitpid(-1, &st, WNOHANG);
    if (r <= 0) return prog_done;
    if (r == child) {
      *status = st;
      prog_done = true;
    }
  }
}

// The agent is gone: SIGTERM to prog, up to grace_ms for it to exit, then
// SIGKILL to everything below the shim and to the group (the shim included).
[[noreturn]] void StopAfterAgentDeath(pid_t child, long grace_ms) {
  kill(child, SIGTERM);
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += grace_ms / 1000;
  deadline.tv_nsec += (grace_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1000000000L;
  }
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int status = 0;
  bool done = false;
  while (!done) {
    struct timespec now, left;
    clock_gettime(CLOCK_MONOTONIC, &now);
    left.tv_sec = deadline.tv_sec - now.tv_sec;
    left.tv_nsec = deadline.tv_nsec - now.tv_nsec;
    if (left.tv_nsec < 0) {
      left.tv_sec -= 1;
      left.tv_nsec += 1000000000L;
    }
    if (left.tv_sec < 0) break;
    siginfo_t info;
    if (sigtimedwait(&chld, &info, &left) < 0 && errno == EAGAIN) break;
    done = ReapAll(child, &status);
  }
  meshrun::agent::StopDescendants(getpid(), 0, std::chrono::milliseconds(0));
  kill(0, SIGKILL);  // The group, this shim included.
  _exit(137);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || strcmp(argv[2], "--") != 0) {
    fprintf(stderr, "usage: meshrun-worker-shim <grace_ms> -- prog [args...]\n");
    return 2;
  }
  const long grace_ms = strtol(argv[1], nullptr, 10);
  const pid_t agent = getppid();
  // Block everything catchable: the shim takes every signal with
  // sigwaitinfo (the agent starts it with all signals blocked already).
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  prctl(PR_SET_PDEATHSIG, ParentDeathSignal());
  if (getppid() != agent) _exit(1);  // The agent died before prctl.
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  pid_t child = fork();
  if (child < 0) {
    perror("meshrun-worker-shim: fork");
    return 1;
  }
  if (child == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // The agent passes a resolved path: no PATH search, no /bin/sh fallback.
    execv(argv[3], argv + 3);
    const char* msg = "meshrun-worker-shim: cannot execute ";
    ssize_t unused = write(2, msg, strlen(msg));
    unused = write(2, argv[3], strlen(argv[3]));
    unused = write(2, ": ", 2);
    const char* why = strerror(errno);
    unused = write(2, why, strlen(why));
    unused = write(2, "\n", 1);
    (void)unused;
    _exit(127);
  }
  for (;;) {
    siginfo_t info;
    if (sigwaitinfo(&all, &info) < 0) continue;  // EINTR
    if (info.si_signo == SIGCHLD) {
      int status = 0;
      if (ReapAll(child, &status)) ExitLike(status);
      continue;
    }
    if (info.si_signo == ParentDeathSignal()) StopAfterAgentDeath(child, grace_ms);
    // The agent's stop and pass-through signals go to prog only. The
    // group's own copies (kill(-pgid) by anyone) reached prog already.
    if (info.si_pid == agent && (info.si_code == SI_USER || info.si_code == SI_QUEUE)) {
      kill(child, info.si_signo);
    }
  }
}
