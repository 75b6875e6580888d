#include "agent/signal_policy.h"

#include <signal.h>

namespace meshrun::agent {
namespace {

sigset_t g_ignored_at_start;
bool g_recorded = false;

}  // namespace

std::vector<int> DefaultHandledSignals() { return {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}; }

bool PassThrough(int signo) { return signo == SIGUSR1 || signo == SIGUSR2 || signo == SIGWINCH || signo == SIGCONT; }

void RecordInheritedDispositions() {
  sigemptyset(&g_ignored_at_start);
  for (int s = 1; s < NSIG; ++s) {
    struct sigaction old {};
    if (sigaction(s, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) {
      sigaddset(&g_ignored_at_start, s);
    }
  }
  g_recorded = true;
}

bool IgnoredAtStart(int signo) { return g_recorded && sigismember(&g_ignored_at_start, signo) == 1; }

std::vector<int> WithoutInheritedIgnored(const std::vector<int>& handled, std::vector<int>* dropped) {
  std::vector<int> out;
  for (int s : handled) {
    if (!IgnoredAtStart(s)) {
      out.push_back(s);
    } else if (s == SIGHUP) {
      if (dropped != nullptr) dropped->push_back(s);
    } else {
      ::signal(s, SIG_DFL);  // Blocked next (BlockSignals): handled by the agent, default in its workers.
      sigdelset(&g_ignored_at_start, s);
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace meshrun::agent
