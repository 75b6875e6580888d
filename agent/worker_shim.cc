// meshrun-worker-shim: the parent of every worker, so that nothing of a
// worker outlives its agent (DESIGN.md §4a).
//
//   meshrun-worker-shim <grace_ms> -- prog args...
//
// The agent starts the shim as the leader of the worker's process group.
// The shim runs prog in that group and waits for it. When prog ends, the
// shim ends the same way (its exit code, or the same signal). When the
// agent dies (even by SIGKILL), the kernel signals the shim (parent-death
// signal), which sends SIGTERM to the whole group (prog and its
// grandchildren), waits up to grace_ms, then SIGKILLs the group.
// Signals the agent forwards to the group reach prog; the shim blocks them.
// Only async-signal-safe calls run between fork and exec. No dependencies.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || strcmp(argv[2], "--") != 0) {
    fprintf(stderr, "usage: meshrun-worker-shim <grace_ms> -- prog [args...]\n");
    return 2;
  }
  const long grace_ms = strtol(argv[1], nullptr, 10);
  const pid_t agent = getppid();
  // Block everything catchable: forwarded signals are meant for prog, and
  // the shim waits for the two it handles with sigwaitinfo.
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  prctl(PR_SET_PDEATHSIG, ParentDeathSignal());
  if (getppid() != agent) _exit(1);  // The agent died before prctl.

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
  sigset_t wanted;
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGCHLD);
  sigaddset(&wanted, ParentDeathSignal());
  for (;;) {
    siginfo_t info;
    if (sigwaitinfo(&wanted, &info) < 0) continue;  // EINTR
    if (info.si_signo == SIGCHLD) {
      int status = 0;
      pid_t r = waitpid(child, &status, WNOHANG);
      if (r == child) ExitLike(status);
      continue;
    }
    // The agent is gone: stop the whole group, then kill it.
    kill(0, SIGTERM);
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
    for (;;) {
      struct timespec now, left;
      clock_gettime(CLOCK_MONOTONIC, &now);
      left.tv_sec = deadline.tv_sec - now.tv_sec;
      left.tv_nsec = deadline.tv_nsec - now.tv_nsec;
      if (left.tv_nsec < 0) {
        left.tv_sec -= 1;
        left.tv_nsec += 1000000000L;
      }
      if (left.tv_sec < 0) break;
      if (sigtimedwait(&chld, &info, &left) < 0 && errno == EAGAIN) break;
      int status = 0;
      if (waitpid(child, &status, WNOHANG) == child) break;
    }
    kill(0, SIGKILL);  // The group, grandchildren and this shim included.
    _exit(137);
  }
}
