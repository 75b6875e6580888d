#include "agent/kept_calls.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace meshrun::agent {

KeptCalls::KeptCalls(absl::Duration retry_after)
    : retry_after_(std::max(retry_after, absl::Milliseconds(10))), timer_([this] { Loop(); }) {}

KeptCalls::~KeptCalls() { Stop(); }

void KeptCalls::Add(Resend resend) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      kept_.push_back(Kept{absl::Now(), std::move(resend)});
      return;
    }
  }
  resend(false);
}

void KeptCalls::ResendAll() {
  std::vector<Kept> all;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    all.swap(kept_);
  }
  for (Kept& k : all) k.resend(true);
}

void KeptCalls::Stop() {
  std::vector<Kept> all;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (timer_.joinable()) timer_.join();
  {
    absl::MutexLock lock(&mu_);
    all.swap(kept_);
  }
  for (Kept& k : all) k.resend(false);
}

size_t KeptCalls::size() const {
  absl::MutexLock lock(&mu_);
  return kept_.size();
}

void KeptCalls::Loop() {
  absl::MutexLock lock(&mu_);
  // Bounded: it ends with Stop, waking four times per retry_after meanwhile.
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), retry_after_ / 4)) {
    const absl::Time now = absl::Now();
    auto due = std::stable_partition(kept_.begin(), kept_.end(),
                                     [&](const Kept& k) { return now - k.since < retry_after_; });
    if (due == kept_.end()) continue;
    std::vector<Kept> resend(std::make_move_iterator(due), std::make_move_iterator(kept_.end()));
    kept_.erase(due, kept_.end());
    mu_.Unlock();
    for (Kept& k : resend) k.resend(true);
    mu_.Lock();
  }
}

}  // namespace meshrun::agent
