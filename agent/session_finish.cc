#include "agent/session.h"

#include <sys/wait.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "agent/failure_summary.h"
#include "agent/worker_stop.h"

namespace meshrun::agent {

// Prints the failure summary (failure_summary.h) and returns the root
// cause's exit code (1 when unknown).
int Session::Summary(const std::optional<WorkerFailure>& root) {
  SummaryContext c{o_.run_id,           round_.round,        node_.hostname,  node_.node_id, failed_error_file_,
                   round_.restart_count, o_.max_restarts, o_.permanent_failure_exit_code};
  if (replica_group_ >= 0) c.scope = absl::StrCat("replica group ", replica_group_);
  for (const Worker& w : workers_) {
    const bool is_root = root && root->node_id == node_.node_id && root->local_rank == w.local_rank;
    if (is_root) continue;
    if (w.stopped) {
      ++c.others_stopped;
    } else if (!w.running && WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0) {
      ++c.others_exited_ok;
    }
  }
  std::fputs(FormatFailureSummary(root, c).c_str(), stderr);
  return root ? ExitCodeOfFailure(*root) : 1;
}

// The job is over: what the workers left behind (reparented to this
// agent, a subreaper) is stopped, unless --keep_orphans.
void Session::EndOfJob() {
  const int n = StopLeftovers(o_.shutdown_timeout, o_.keep_orphans);
  if (n == 0) return;
  if (o_.keep_orphans) {
    std::fprintf(stderr, "meshrun: left %d process%s started by the workers running (--keep_orphans)\n", n,
                 n == 1 ? "" : "es");
  } else {
    std::fprintf(stderr, "meshrun: stopped %d process%s left behind by the workers (--keep_orphans keeps them)\n",
                 n, n == 1 ? "" : "es");
  }
}

// All of this node's workers exited 0: the exit barrier. A restart of the
// run decided as they finished (another node's failure reported first)
// still takes this node: it joins the next round, as it would had its
// workers been running. The restart's event may come after the barrier's
// refusal ("not a member of ... round N"), so a refused barrier waits for
// it up to rdzv_conf exit_barrier_restart_grace.
std::optional<int> Session::Finish() {
  const int64_t round = round_.round;
  client_->ReportFinishedAsync(node_.node_id, round, o_.exit_barrier_timeout,
                               [this, round](absl::StatusOr<rendezvous::BarrierResult> r) {
                                 q_.Push(BarrierDone{std::move(r), round});
                               });
  absl::Time deadline = absl::InfiniteFuture();
  for (;;) {
    std::optional<Event> ev = NextEvent(deadline);
    if (!ev) return 0;  // A refused barrier (warned) and no restart within the grace.
    if (auto* b = std::get_if<BarrierDone>(&*ev)) {
      if (b->round != round) continue;  // An earlier round's.
      if (!b->result.ok()) {
        log_->warn("exit barrier: {}", b->result.status().ToString());
        deadline = absl::Now() + o_.exit_barrier_restart_grace;
        continue;
      }
      if (!b->result->all_finished) {
        std::fprintf(stderr, "meshrun: warning: exit barrier timed out after %s: %d of %d nodes finished\n",
                     absl::FormatDuration(o_.exit_barrier_timeout).c_str(), b->result->finished_nodes,
                     b->result->node_count);
      }
      return 0;
    }
    if (auto* se = std::get_if<ServerEvent>(&*ev)) {
      if (se->gen != gen_) continue;
      const RunEvent& e = se->event;
      if (e.kind == RunEvent::Kind::kRunFailed) return Summary(e.root_cause);
      if (e.kind == RunEvent::Kind::kRestart && e.round > round) {
        std::fprintf(stderr, "meshrun: %s; this node's workers had finished; restarting them (round %lld)\n",
                     e.root_cause ? DescribeFailure(*e.root_cause).c_str() : "restart requested",
                     static_cast<long long>(e.round));
        return std::nullopt;
      }
      continue;
    }
    if (auto* sig = std::get_if<SignalReceived>(&*ev)) {
      received_signal_ = sig->signo;
      if (o_.on_stop_signal) o_.on_stop_signal(sig->signo);
      return 128 + sig->signo;
    }
    if (auto* sc = std::get_if<StreamClosed>(&*ev)) {
      if (sc->gen == gen_ && !sc->status.ok()) return Fatal(std::string(sc->status.message()));
    }
  }
}

}  // namespace meshrun::agent
