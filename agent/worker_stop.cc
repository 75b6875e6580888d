#include "agent/worker_stop.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>

#include "agent/process_tree.h"
#include "agent/signal_policy.h"
#include "common/logging.h"

namespace meshrun::agent {
namespace {

int Running(const std::vector<Worker>& workers) {
  int n = 0;
  for (const auto& w : workers) n += w.running ? 1 : 0;
  return n;
}

Worker* Find(std::vector<Worker>& workers, pid_t pid) {
  for (auto& w : workers) {
    if (w.pid == pid) return &w;
  }
  return nullptr;
}

std::chrono::milliseconds Ms(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(0, absl::ToInt64Milliseconds(d)));
}

}  // namespace

void SignalMains(const std::vector<Worker>& workers, int signo) {
  for (const auto& w : workers) {
    if (w.running && w.pid > 0) ::kill(w.pid, signo);
  }
}

void BecomeSubreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    Logger("agent")->warn("PR_SET_CHILD_SUBREAPER failed: processes the workers leave behind may escape");
  }
}

int StopWorkers(std::vector<Worker>& workers, int signo, absl::Duration grace, bool by_signal, EventQueue& q,
                std::deque<Event>& deferred) {
  if (signo != 0) SignalMains(workers, signo);
  const absl::Time deadline = absl::Now() + grace;
  bool escalate = false;
  int kept = 0;  // A stop signal that arrived during a stop it did not start.
  while (Running(workers) > 0 && !escalate) {
    std::optional<Event> ev = q.Pop(deadline);
    if (!ev) break;
    if (auto* c = std::get_if<ChildExit>(&*ev)) {
      if (Worker* w = Find(workers, c->pid)) {
        w->running = false;
        w->status = c->status;
      }
    } else if (auto* sig = std::get_if<SignalReceived>(&*ev)) {
      if (PassThrough(sig->signo)) {
        SignalMains(workers, sig->signo);
      } else if (by_signal || kept != 0) {
        escalate = true;  // A second signal: stop waiting.
      } else {
        kept = sig->signo;  // The workers are stopping already: their grace stands.
        deferred.push_back(std::move(*ev));
      }
    } else {
      deferred.push_back(std::move(*ev));
    }
  }
  // Whatever is left below the agent: the groups' other members, helpers
  // that left their group, orphans. The main processes are gone in time:
  // their helpers get SIGTERM and the rest of the grace; else SIGKILL now.
  const bool mains_done = Running(workers) == 0 && !escalate;
  const int found = StopDescendants(::getpid(), mains_done ? SIGTERM : 0,
                                    mains_done ? Ms(deadline - absl::Now()) : std::chrono::milliseconds(0));
  if (found > 0) Logger("agent")->info("stopped {} processes left below the workers", found);
  const absl::Time kill_deadline = absl::Now() + absl::Seconds(10);
  while (Running(workers) > 0) {
    std::optional<Event> ev = q.Pop(kill_deadline);
    if (!ev) {
      Logger("agent")->error("{} workers did not exit after SIGKILL; abandoning them", Running(workers));
      break;
    }
    if (auto* c = std::get_if<ChildExit>(&*ev)) {
      if (Worker* w = Find(workers, c->pid)) {
        w->running = false;
        w->status = c->status;
      }
    } else if (!std::get_if<SignalReceived>(&*ev)) {
      deferred.push_back(std::move(*ev));
    }
  }
  return kept;
}

int StopLeftovers(absl::Duration grace, bool keep) {
  if (keep) return static_cast<int>(Descendants(ReadProcessTable(), ::getpid()).size());
  return StopDescendants(::getpid(), SIGTERM, Ms(grace));
}

}  // namespace meshrun::agent
