// ExitBarrierWaiters: the nodes waiting at a run's exit barrier (torchrun's
// exit barrier: a node whose workers all exited 0 waits until every member
// has, so that no node leaves while another may still need it). Each waiter
// is parked with a deadline until the barrier completes (every member
// finished), the run ends otherwise, its timeout passes, or its client
// cancels. Which members have finished is the Run's (its members carry the
// flag a RunRecord keeps across a failover); this class holds the parked
// callbacks and their timers. Not thread-safe: a Run holds one under its
// lock, and answers the callbacks it takes after releasing that lock.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/types.h"
#include "rendezvous/run/sparse_maps.h"
#include "rendezvous/policy/timer.h"

namespace meshrun::rendezvous {

class ExitBarrierWaiters {
 public:
  using Callback = absl::AnyInvocable<void(absl::StatusOr<BarrierResult>)>;

  // `timer` must outlive the waiters.
  explicit ExitBarrierWaiters(DeadlineTimer* timer) : timer_(timer) {}

  // Parks `done`; at `deadline`, `on_timeout(id)` runs on the timer's
  // thread (the Run then takes the waiter under its lock: it may have been
  // answered meanwhile). Returns the waiter's id (never 0).
  uint64_t Park(absl::Time deadline, Callback done, std::function<void(uint64_t)> on_timeout) {
    const uint64_t id = next_id_++;
    DeadlineTimer::Id tid = timer_->Schedule(deadline, [on_timeout = std::move(on_timeout), id] { on_timeout(id); });
    waiters_.emplace(id, Waiter{tid, std::move(done)});
    return id;
  }
  // Takes waiter `id` out for answering (nullopt: answered already), its
  // timer cancelled unless the timer is what fired (`timed_out`).
  std::optional<Callback> Take(uint64_t id, bool timed_out) {
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return std::nullopt;
    if (!timed_out) timer_->Cancel(it->second.timer_id);
    Callback cb = std::move(it->second.done);
    waiters_.erase(it);
    ShrinkIfSparse(waiters_);
    return cb;
  }
  // Takes every waiter out, timers cancelled, for answering with one result
  // (the barrier completed, the run failed or was closed).
  std::vector<Callback> TakeAll() {
    std::vector<Callback> out;
    out.reserve(waiters_.size());
    for (auto& [id, w] : waiters_) {
      timer_->Cancel(w.timer_id);
      out.push_back(std::move(w.done));
    }
    waiters_.clear();
    return out;
  }
  // Frees the table itself (a run kept only for its status; none waits).
  void Release() { absl::flat_hash_map<uint64_t, Waiter>().swap(waiters_); }
  size_t size() const { return waiters_.size(); }

 private:
  struct Waiter {
    DeadlineTimer::Id timer_id;
    Callback done;
  };
  DeadlineTimer* const timer_;
  absl::flat_hash_map<uint64_t, Waiter> waiters_;
  uint64_t next_id_ = 1;
};

}  // namespace meshrun::rendezvous
