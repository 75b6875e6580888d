// One run's lighthouse: torchft's quorum service (torchft 0.2.0's
// LighthouseService: Quorum and Heartbeat) over the rule of quorum.h. Replica
// groups ask for a quorum at each step; the lighthouse answers every waiting
// group that the next quorum includes, all with the same quorum id, which
// grows by one whenever the members change (as torchft's does). Free of
// gRPC: the service adapter (rendezvous/grpc/lighthouse_service.h) holds
// the calls, the registry (lighthouse_registry.h) the ticks.
//
// Thread-safe. Answers are called outside the lighthouse's lock, on the
// thread of the Join or Tick that formed the quorum (or of Close).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rendezvous/lighthouse/quorum.h"

namespace meshrun::rendezvous::lighthouse {

class Lighthouse {
 public:
  // Called once per Join: with the first quorum that includes its group,
  // or an error (UNAVAILABLE from Close).
  using Answer = absl::AnyInvocable<void(absl::StatusOr<Quorum>)>;
  static constexpr int64_t kWaitsPerGroup = 4;
  // The members a quorum may hold, bytes (ids, addresses, user data; each
  // answer carries them all): torchft's client decodes at most 4 MiB.
  static constexpr int64_t kDefaultMaxQuorumBytes = 1 << 20;

  // `max_replica_groups`: groups known at once (heartbeating or waiting);
  // a Join or Heartbeat of one more is refused, as is a group's Join while
  // kWaitsPerGroup of its calls wait, and a Join whose member would take the
  // waiting members past `max_quorum_bytes`. A group that is not healthy
  // and has no call waiting is forgotten (it holds no place). `first_quorum_id`: the id
  // the last quorum had (a replica that took over keeps counting up).
  Lighthouse(LighthouseSettings settings, int64_t max_replica_groups, int64_t first_quorum_id = 0,
             int64_t max_quorum_bytes = kDefaultMaxQuorumBytes);

  // A group's Quorum call (torchft's LighthouseService.Quorum): a heartbeat,
  // and a place in the next quorum, formed at once when the rule allows.
  // Returns a ticket for Cancel, or RESOURCE_EXHAUSTED (max_replica_groups)
  // or FAILED_PRECONDITION (closed); `answer` is then not called. A group
  // left out of a quorum waits again for the next one, as torchft's does.
  absl::StatusOr<uint64_t> Join(QuorumMember member, absl::Time now, Answer answer);
  // The call ended without an answer (its deadline, or cancelled): true
  // when its answer will never be called; false when it was, or is being.
  // A group with no call left waiting is no candidate for the next quorum
  // (a dead process's call is cancelled: torchft keeps such a group until
  // its heartbeat times out, and may put a dead member in a quorum); it
  // stays healthy until its heartbeat times out.
  bool Cancel(uint64_t ticket);
  // torchft's LighthouseService.Heartbeat. RESOURCE_EXHAUSTED as Join.
  absl::Status Heartbeat(const std::string& replica_id, absl::Time now);
  // Forms a quorum when the rule allows (quorum.h), and answers the
  // waiting calls of its members. Called every quorum_tick by the registry.
  void Tick(absl::Time now);
  // Answers every waiting call with `why` (UNAVAILABLE) and refuses new
  // ones: the server stops, or stopped leading.
  void Close(const absl::Status& why);

  // What `meshrun status` shows of it.
  struct View {
    int64_t quorum_id = 0;
    int64_t quorum_members = 0;
    int64_t waiting = 0;
    int64_t replica_groups = 0;
    std::string reason;
    // The last quorum's members (torchft's replica ids) and the step each
    // had, sorted by replica id.
    std::vector<std::pair<std::string, int64_t>> member_steps;
  };
  View view() const;

  const LighthouseSettings& settings() const { return settings_; }
  int64_t quorum_id() const;
  // Calls waiting for a quorum now.
  int64_t waiting() const;
  // Why the last tick formed no quorum, or that it formed one.
  std::string last_reason() const;

 private:
  struct Waiter {
    QuorumMember member;
    Answer answer;
  };
  // Forms a quorum if the rule allows; the answers to call, which the
  // caller calls after releasing mu_.
  std::vector<std::pair<Answer, Quorum>> TickLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops heartbeats older than heartbeat_timeout (unhealthy either way).
  void ForgetStale(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Knows(const std::string& replica_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One call of `replica_id` waits no more.
  void Unwait(const std::string& replica_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LighthouseSettings settings_;
  const int64_t max_replica_groups_;
  const int64_t max_quorum_bytes_;
  // Calls waiting per replica id.
  std::map<std::string, int64_t> waits_of_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex mu_;
  QuorumState state_ ABSL_GUARDED_BY(mu_);
  int64_t quorum_id_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  std::string last_reason_ ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshrun::rendezvous::lighthouse
