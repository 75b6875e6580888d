#include "rendezvous/state/etcd/replica_list.h"

#include <utility>

namespace meshrun::rendezvous::state::etcd {

ReplicaList::ReplicaList(Read read, absl::Duration quick_timeout)
    : read_(std::move(read)), quick_timeout_(quick_timeout), thread_([this] { Refresher(); }) {}

ReplicaList::~ReplicaList() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

std::vector<ReplicaView> ReplicaList::Get() {
  {
    absl::MutexLock lock(&mu_);
    if (failing_) {
      refresh_ = true;
      return {};
    }
  }
  absl::StatusOr<std::vector<ReplicaView>> read = read_(quick_timeout_);
  if (read.ok()) return std::move(*read);
  absl::MutexLock lock(&mu_);
  failing_ = true;
  refresh_ = true;
  return {};
}

void ReplicaList::MarkFailing() {
  absl::MutexLock lock(&mu_);
  failing_ = true;
  refresh_ = true;
}

void ReplicaList::MarkAnswering() {
  absl::MutexLock lock(&mu_);
  failing_ = false;
}

void ReplicaList::Refresher() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto asked = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return refresh_ || stop_; };
      mu_.Await(absl::Condition(&asked));
      if (stop_) return;
      refresh_ = false;
    }
    const bool ok = read_(absl::ZeroDuration()).ok();
    absl::MutexLock lock(&mu_);
    if (ok) failing_ = false;
  }
}

}  // namespace meshrun::rendezvous::state::etcd
