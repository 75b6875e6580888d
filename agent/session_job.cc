// A job of replica groups (--replica_groups): what spans its groups. Each
// group's run restarts and ends on its own (session_workers.cc,
// session_finish.cc); here the job fails when fewer than
// --min_replica_groups groups are alive, and every agent waits for the
// job's end (agent/replica_group_job.h judges both).
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/replica_group_job.h"
#include "agent/session.h"
#include "agent/signal_policy.h"

namespace meshrun::agent {

std::optional<int> Session::FailBelowMinReplicaGroups(const ReplicaGroupsBelowMin& e) {
  std::fprintf(stderr, "meshrun: too few replica groups are alive (%s); stopping group %d\n", e.why.c_str(),
               replica_group_);
  WorkerFailure f;
  f.node_id = node_.node_id;
  f.hostname = node_.hostname;
  f.node_rank = round_.node_rank;
  f.exit_code = 1;
  f.permanent = true;  // No restart brings the dead groups back.
  f.round = round_.round;
  f.message = absl::StrCat("fewer than --min_replica_groups=", o_.min_replica_groups, " of the ", e.groups,
                           " replica groups of run '", job_run_id_, "' are alive: ", e.failed, " failed");
  failed_error_file_.clear();
  return ReportAndStop(std::move(f));
}

int Session::AwaitReplicaGroups(int code) {
  const int m = o_.min_replica_groups;
  bool said = false;
  absl::Time answered = absl::Now();
  // A group not formed yet (its nodes slower to start) is waited for as a
  // join is: up to join_timeout.
  const absl::Time unformed_until = absl::Now() + o_.join_timeout;
  for (;;) {  // Bounded: the other groups' runs end as their nodes finish, fail or leave.
    absl::StatusOr<std::vector<rendezvous::ReplicaGroupState>> groups =
        client_->ReplicaGroupStates(job_run_id_, o_.replica_groups, o_.read_timeout);
    if (groups.ok() && static_cast<int>(groups->size()) == o_.replica_groups) {
      answered = absl::Now();
      if (!(*groups)[replica_group_].ended()) return code;  // This node's own end.
      const ReplicaGroupJob j = JudgeReplicaGroups(*groups, m, absl::Now() < unformed_until);
      if (j.over && j.succeeded) {
        if (code != 0) {
          std::fprintf(stderr, "meshrun: replica group %d failed, but the job succeeded: %s\n", replica_group_,
                       j.summary.c_str());
        }
        return 0;
      }
      if (j.over) {
        std::fprintf(stderr, "meshrun: the job failed: %s\n", j.summary.c_str());
        return code != 0 ? code : 1;
      }
      if (!said) {
        std::fprintf(stderr, "meshrun: replica group %d ended; waiting for the job's other groups (%s)\n",
                     replica_group_, j.summary.c_str());
        said = true;
      }
    } else if (!said) {
      return code;  // The server cannot say how the job stands: this group's result.
    } else if (absl::Now() - answered >= o_.exit_barrier_timeout) {
      std::fprintf(stderr, "meshrun: warning: no answer on the job's replica groups for %s (exit_barrier_timeout): %s\n",
                   absl::FormatDuration(o_.exit_barrier_timeout).c_str(),
                   groups.ok() ? "a wrong number of groups" : std::string(groups.status().message()).c_str());
      return code;
    }
    const absl::Time next = absl::Now() + o_.keep_alive_interval;
    while (std::optional<Event> ev = NextEvent(next)) {
      auto* sig = std::get_if<SignalReceived>(&*ev);
      if (sig == nullptr || PassThrough(sig->signo)) continue;
      received_signal_ = sig->signo;
      if (o_.on_stop_signal) o_.on_stop_signal(sig->signo);
      std::fprintf(stderr, "meshrun: received %s while waiting for the job's other replica groups; exiting\n",
                   SignalName(sig->signo).c_str());
      return 128 + sig->signo;
    }
  }
}

std::optional<int> Session::StandbyAtJobEnd(const absl::Status& refusal) {
  if (!absl::IsFailedPrecondition(refusal) || !absl::StrContains(refusal.message(), "has ended")) return std::nullopt;
  absl::StatusOr<std::vector<rendezvous::ReplicaGroupState>> groups =
      client_->ReplicaGroupStates(job_run_id_, o_.replica_groups, o_.read_timeout);
  if (!groups.ok()) return std::nullopt;
  const ReplicaGroupJob j = JudgeReplicaGroups(*groups, o_.min_replica_groups);
  std::fprintf(stderr, "meshrun: every replica group of run '%s' has ended without this standby node: %s\n",
               job_run_id_.c_str(), j.summary.c_str());
  return j.succeeded ? 0 : 1;
}

}  // namespace meshrun::agent
