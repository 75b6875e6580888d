#include "agent/process.h"

#include <fcntl.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/syscall.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/signal_policy.h"
#include "common/checks.h"
#include "common/open_files.h"

namespace meshrun::agent {
namespace {

struct SigName {
  int signo;
  const char* name;
};
constexpr SigName kSignals[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},     {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},   {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},   {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},   {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
    {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"},   {SIGTSTP, "SIGTSTP"}, {SIGXCPU, "SIGXCPU"},
    {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},
};

}  // namespace

absl::StatusOr<Child> Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& envp,
                            int stdout_fd, int stderr_fd, bool all_signals_blocked, const CpuBinding* binding) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  // Everything the child needs is prepared before fork: after fork only
  // async-signal-safe calls are allowed (gRPC threads may hold locks).
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<char*> cenv;
  for (const auto& e : envp) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return PosixError(errno, "pipe2");
  const pid_t parent = ::getpid();
  sigset_t child_mask;
  if (all_signals_blocked) {
    sigfillset(&child_mask);
  } else {
    sigemptyset(&child_mask);
  }
  const bool restore_sigpipe = !IgnoredAtStart(SIGPIPE);
  // The binding, as the system calls take it (built before fork).
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  constexpr int kMaxNodes = 1024;
  unsigned long nodes[kMaxNodes / (8 * sizeof(unsigned long))] = {};
  const bool bind_cpus = binding != nullptr && !binding->cpus.empty();
  const bool bind_mem = binding != nullptr && !binding->mem_nodes.empty();
  if (bind_cpus) {
    for (int c : binding->cpus) {
      if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &cpus);
    }
  }
  if (bind_mem) {
    for (int n : binding->mem_nodes) {
      if (n >= 0 && n < kMaxNodes) nodes[n / (8 * sizeof(unsigned long))] |= 1UL << (n % (8 * sizeof(unsigned long)));
    }
  }

  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return PosixError(err, "fork");
  }
  if (pid == 0) {
    ::close(pipefd[0]);
    // A session of its own (and so a process group of its own, id = pid), as
    // torchrun's workers (Python's start_new_session): the kernel's scheduler
    // autogroups then give each worker its own share of the CPUs. A fresh
    // child is never a group leader, so setsid cannot fail here.
    ::setsid();
    const int session_made = 0;
    ssize_t written = ::write(pipefd[1], &session_made, sizeof(session_made));
    (void)written;
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // The agent died before prctl.
    if (stdout_fd >= 0) ::dup2(stdout_fd, 1);
    if (stderr_fd >= 0) ::dup2(stderr_fd, 2);
    if (bind_cpus && ::sched_setaffinity(0, sizeof(cpus), &cpus) != 0) {
      const char msg[] = "meshrun: warning: --numa_binding: sched_setaffinity failed; running unbound\n";
      ssize_t unused = ::write(2, msg, sizeof(msg) - 1);
      (void)unused;
    }
    if (bind_mem && ::syscall(SYS_set_mempolicy, MPOL_BIND, nodes, kMaxNodes + 1) != 0) {
      const char msg[] = "meshrun: warning: --numa_binding: set_mempolicy failed; memory is not bound\n";
      ssize_t unused = ::write(2, msg, sizeof(msg) - 1);
      (void)unused;
    }
    ::sigprocmask(SIG_SETMASK, &child_mask, nullptr);
    // gRPC ignores SIGPIPE in this process; an ignored disposition would
    // survive exec, so give the worker the default back (unless meshrun's
    // own parent had it ignored: leave it as meshrun found it).
    if (restore_sigpipe) ::signal(SIGPIPE, SIG_DFL);
    // meshrun raised its own open-files limit; the worker gets the one
    // meshrun was started with (common/open_files.h).
    RestoreOpenFilesLimitInChild();
    ::execve(cargv[0], cargv.data(), cenv.data());
    int err = errno;
    ssize_t unused = ::write(pipefd[1], &err, sizeof(err));
    (void)unused;
    ::_exit(127);
  }
  ::close(pipefd[1]);
  // Returns once the child's session (and group) exists, so signalling the
  // group right after Spawn returns cannot miss: the child writes one int
  // after setsid (EOF instead: it died before, and there is nothing to signal).
  int marker = -1;
  ssize_t n;
  do {
    n = ::read(pipefd[0], &marker, sizeof(marker));
  } while (n < 0 && errno == EINTR);
  return Child{pid, pipefd[0]};
}

absl::Status CheckExec(Child& child, const std::string& argv0) {
  if (child.exec_fd < 0) return absl::OkStatus();
  int err = 0;
  ssize_t n;
  do {
    n = ::read(child.exec_fd, &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  ::close(child.exec_fd);
  child.exec_fd = -1;
  if (n == sizeof(err)) return PosixError(err, "exec", argv0);
  return absl::OkStatus();
}

std::string SignalName(int signo) {
  for (const auto& s : kSignals) {
    if (s.signo == signo) return s.name;
  }
  return absl::StrCat("SIG", signo);
}

absl::StatusOr<int> ParseSignal(const std::string& text) {
  std::string t = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  int n = 0;
  if (absl::SimpleAtoi(t, &n) && n > 0 && n < NSIG) return n;
  if (!absl::StartsWith(t, "SIG")) t = "SIG" + t;
  for (const auto& s : kSignals) {
    if (t == s.name) return s.signo;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown signal '", text, "'; use a name like SIGTERM or SIGUSR1, or a number 1..", NSIG - 1));
}

int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exit code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    return absl::StrCat("signal ", SignalName(sig), " (", sig, ")",
                        WCOREDUMP(wait_status) ? ", core dumped" : "");
  }
  return absl::StrCat("wait status ", wait_status);
}

void BlockSignals(const std::vector<int>& signals) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int s : signals) sigaddset(&set, s);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

absl::StatusOr<std::string> ResolveProgram(const std::string& program) {
  auto check = [](const std::string& path) -> absl::Status {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return PosixError(errno, "stat", path);
    if (S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat("'", path, "' is a directory"));
    if (::access(path.c_str(), X_OK) != 0) {
      return absl::PermissionDeniedError(absl::StrCat("'", path, "' is not executable"));
    }
    return absl::OkStatus();
  };
  if (program.empty()) return absl::InvalidArgumentError("empty program name");
  if (absl::StrContains(program, '/')) {
    absl::Status s = check(program);
    if (!s.ok()) {
      if (absl::IsNotFound(s)) return absl::NotFoundError(absl::StrCat("program '", program, "' does not exist"));
      return s;
    }
    return program;
  }
  const char* path_env = std::getenv("PATH");
  std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  absl::Status last = absl::OkStatus();
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    if (dir.empty()) dir = ".";
    std::string candidate = absl::StrCat(dir, "/", program);
    absl::Status s = check(candidate);
    if (s.ok()) return candidate;
    if (absl::IsPermissionDenied(s)) last = s;
  }
  if (!last.ok()) return last;
  return absl::NotFoundError(absl::StrCat("program '", program, "' not found on PATH (", path, ")"));
}

SignalThread::SignalThread(std::vector<int> signals, std::function<void(int)> on_signal,
                           std::function<void(pid_t, int)> on_child_exit)
    : signals_(std::move(signals)), on_signal_(std::move(on_signal)), on_child_exit_(std::move(on_child_exit)) {}

absl::Status SignalThread::Start() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int s : signals_) sigaddset(&set, s);
  signal_fd_ = ::signalfd(-1, &set, SFD_CLOEXEC);
  if (signal_fd_ < 0) return PosixError(errno, "signalfd");
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) return PosixError(errno, "eventfd");
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

SignalThread::~SignalThread() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    ssize_t unused = ::write(stop_fd_, &one, sizeof(one));
    (void)unused;
    thread_.join();
  }
  if (signal_fd_ >= 0) ::close(signal_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

void SignalThread::Loop() {
  pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    int rc = ::poll(fds, 2, -1);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    signalfd_siginfo info;
    ssize_t n = ::read(signal_fd_, &info, sizeof(info));
    if (n != sizeof(info)) continue;
    if (static_cast<int>(info.ssi_signo) == SIGCHLD) {
      // SIGCHLD coalesces: reap every child that has exited.
      for (;;) {
        int status = 0;
        pid_t pid = ::waitpid(-1, &status, WNOHANG);
        if (pid <= 0) break;
        on_child_exit_(pid, status);
      }
    } else {
      on_signal_(static_cast<int>(info.ssi_signo));
    }
  }
}

}  // namespace meshrun::agent
