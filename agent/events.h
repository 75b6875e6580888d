// What the node agent's one thread reacts to, and the queue every source
// (signal thread, gRPC callbacks, the watch and heartbeat threads) feeds.
#pragma once

#include <sys/types.h>

#include <deque>
#include <optional>
#include <string>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/types.h"

namespace meshrun::agent {

struct ChildExit { pid_t pid; int status; };
struct SignalReceived { int signo; };
struct JoinDone { absl::StatusOr<rendezvous::Assignment> result; };
// The exit barrier's answer for round `round` (a later round's Finish
// ignores an earlier one's).
struct BarrierDone { absl::StatusOr<rendezvous::BarrierResult> result; int64_t round; };
// Events from the server carry the membership generation they belong to:
// after this node rejoins as a new member, the old stream's are ignored.
struct ServerEvent { rendezvous::RunEvent event; int gen; };
struct StreamClosed { absl::Status status; int gen; };
struct Stale { std::string why; int gen; };
// --min_replica_groups: fewer groups of the job are alive than it needs
// (`why`: ReplicaGroupJob::summary; `failed` of `groups` failed); from the
// heartbeat thread.
struct ReplicaGroupsBelowMin { std::string why; int failed; int groups; int gen; };
using Event = std::variant<ChildExit, SignalReceived, JoinDone, BarrierDone, ServerEvent, StreamClosed, Stale,
                           ReplicaGroupsBelowMin>;

// A FIFO of events. Push from any thread; Pop from the agent's thread.
// Waiting is a condition wait, never a sleep. Thread-safe.
class EventQueue {
 public:
  void Push(Event e) {
    absl::MutexLock lock(&mu_);
    q_.push_back(std::move(e));
  }
  // The oldest event, or nullopt once `deadline` passes with none.
  std::optional<Event> Pop(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !q_.empty(); };
    mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
    if (q_.empty()) return std::nullopt;
    Event e = std::move(q_.front());
    q_.pop_front();
    return e;
  }

 private:
  absl::Mutex mu_;
  std::deque<Event> q_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshrun::agent
