#include "rendezvous/policy/timer.h"

#include "rendezvous/run/sparse_maps.h"

namespace meshrun::rendezvous {

DeadlineTimer::DeadlineTimer() : thread_([this] { Loop(); }) {}

DeadlineTimer::~DeadlineTimer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

DeadlineTimer::Id DeadlineTimer::Schedule(absl::Time when, absl::AnyInvocable<void()> fn) {
  absl::MutexLock lock(&mu_);
  Id id = next_id_++;
  auto pos = by_time_.emplace(when, id);
  entries_.emplace(id, Entry{pos, std::move(fn)});
  return id;
}

bool DeadlineTimer::Cancel(Id id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  by_time_.erase(it->second.pos);
  entries_.erase(it);
  ShrinkIfSparse(entries_);
  return true;
}

bool DeadlineTimer::CancelAndWait(Id id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    by_time_.erase(it->second.pos);
    entries_.erase(it);
    ShrinkIfSparse(entries_);
    return true;
  }
  if (std::this_thread::get_id() == thread_.get_id()) return false;
  auto finished = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ != id; };
  mu_.Await(absl::Condition(&finished));
  return false;
}

void DeadlineTimer::Loop() {
  mu_.Lock();
  while (!stop_) {
    absl::Time now = absl::Now();
    if (!by_time_.empty() && by_time_.begin()->first <= now) {
      Id id = by_time_.begin()->second;
      by_time_.erase(by_time_.begin());
      auto node = entries_.extract(id);
      ShrinkIfSparse(entries_);
      running_ = id;
      mu_.Unlock();
      node.mapped().fn();
      // The callback and what it captured are gone before CancelAndWait returns.
      node = decltype(node)();
      mu_.Lock();
      running_ = 0;
      continue;
    }
    absl::Time wake = by_time_.empty() ? absl::InfiniteFuture() : by_time_.begin()->first;
    // Wakes when the earliest deadline passes, a new earlier one arrives, or stop.
    absl::Time first = wake;
    auto changed = [this, first]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || (!by_time_.empty() && by_time_.begin()->first < first);
    };
    mu_.AwaitWithDeadline(absl::Condition(&changed), wake);
  }
  mu_.Unlock();
}

}  // namespace meshrun::rendezvous
