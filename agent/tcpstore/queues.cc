#include "agent/tcpstore/queues.h"

#include "absl/status/status.h"
#include "absl/hash/hash.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace meshrun::agent::tcpstore {

std::string QueueHeadKey(const std::string& name) { return absl::StrCat("queue/", name, "/head"); }
std::string QueueTailKey(const std::string& name) { return absl::StrCat("queue/", name, "/tail"); }
std::string QueueItemKey(const std::string& name, int64_t i) { return absl::StrCat("queue/", name, "/item/", i); }

void Queues::SetStore(std::shared_ptr<Store> store) {
  for (absl::Mutex& m : stripes_) m.Lock();
  {
    absl::MutexLock lock(&mu_);
    store_ = std::move(store);
    pushed_.clear();
    ends_.clear();
  }
  for (absl::Mutex& m : stripes_) m.Unlock();
}

absl::Mutex& Queues::LockOf(const std::string& name) {
  return stripes_[absl::Hash<std::string>()(name) % kLockStripes];
}

absl::StatusOr<int64_t> Queues::Counter(Store& store, const std::string& key) {
  absl::StatusOr<std::string> v = store.Get(key, absl::ZeroDuration());
  if (absl::IsNotFound(v.status())) return 0;
  if (!v.ok()) return v.status();
  int64_t n = 0;
  if (!absl::SimpleAtoi(*v, &n) || n < 0) {
    return absl::InternalError(absl::StrCat("queue key '", key.substr(0, 128), "' holds '", v->substr(0, 32),
                                            "', not a count"));
  }
  return n;
}

absl::StatusOr<std::pair<std::shared_ptr<Store>, Queues::Ends>> Queues::Open(const std::string& name) {
  std::shared_ptr<Store> store;
  {
    absl::MutexLock lock(&mu_);
    store = store_;
    if (store == nullptr) return absl::FailedPreconditionError("no round has started on this node yet");
    auto it = ends_.find(name);
    if (it != ends_.end()) return std::make_pair(store, it->second);
  }
  Ends ends;
  absl::StatusOr<int64_t> head = Counter(*store, QueueHeadKey(name));
  if (!head.ok()) return head.status();
  absl::StatusOr<int64_t> tail = Counter(*store, QueueTailKey(name));
  if (!tail.ok()) return tail.status();
  ends.head = *head;
  ends.tail = *tail;
  if (ends.tail > 0) {  // Only queues that exist are cached.
    absl::MutexLock lock(&mu_);
    ends_[name] = ends;
  }
  return std::make_pair(store, ends);
}

void Queues::Forget(const std::string& name) {
  absl::MutexLock lock(&mu_);
  ends_.erase(name);
}

absl::Status Queues::Push(const std::string& name, const std::string& value) {
  {
    absl::MutexLock queue(&LockOf(name));
    absl::StatusOr<std::pair<std::shared_ptr<Store>, Ends>> open = Open(name);
    if (!open.ok()) return open.status();
    auto& [store, ends] = *open;
    // The item and the tail that makes it visible, together.
    const std::vector<std::string> keys = {QueueItemKey(name, ends.tail), QueueTailKey(name)};
    const std::vector<std::string> values = {value, absl::StrCat(ends.tail + 1)};
    if (absl::Status s = store->MultiSet(keys, values); !s.ok()) {
      Forget(name);
      return s;
    }
    absl::MutexLock lock(&mu_);
    ends_[name] = Ends{ends.head, ends.tail + 1};
    pushed_.insert(name);
  }
  Release(name, /*all=*/false);
  return absl::OkStatus();
}

absl::StatusOr<std::pair<int64_t, std::optional<std::string>>> Queues::Pop(const std::string& name) {
  absl::MutexLock queue(&LockOf(name));
  absl::StatusOr<std::pair<std::shared_ptr<Store>, Ends>> open = Open(name);
  if (!open.ok()) return open.status();
  auto& [store, ends] = *open;
  if (ends.head >= ends.tail) return std::make_pair(int64_t{0}, std::optional<std::string>());
  const std::string item_key = QueueItemKey(name, ends.head);
  absl::StatusOr<std::string> item = store->Get(item_key, absl::ZeroDuration());
  if (!item.ok()) Forget(name);
  if (absl::IsNotFound(item.status())) {
    return absl::DataLossError(absl::StrCat("item ", ends.head, " of queue '", name.substr(0, 128),
                                            "' is missing from the store (its tail is ", ends.tail, ")"));
  }
  if (!item.ok()) return item.status();
  if (absl::Status s = store->Set(QueueHeadKey(name), absl::StrCat(ends.head + 1)); !s.ok()) {
    Forget(name);
    return s;
  }
  {
    absl::MutexLock lock(&mu_);
    ends_[name] = Ends{ends.head + 1, ends.tail};
  }
  (void)store->Delete(item_key);  // Popped already: see the header.
  return std::make_pair(ends.tail - ends.head, std::optional<std::string>(std::move(*item)));
}

absl::StatusOr<int64_t> Queues::Length(const std::string& name) {
  absl::MutexLock queue(&LockOf(name));
  absl::StatusOr<std::pair<std::shared_ptr<Store>, Ends>> open = Open(name);
  if (!open.ok()) return open.status();
  return open->second.tail - open->second.head;
}

bool Queues::AnyQueue(absl::Span<const std::string> keys) {
  absl::MutexLock lock(&mu_);
  for (const std::string& k : keys) {
    if (pushed_.contains(k)) return true;
  }
  return false;
}

bool Queues::AllQueues(absl::Span<const std::string> keys) {
  absl::MutexLock lock(&mu_);
  for (const std::string& k : keys) {
    if (!pushed_.contains(k)) return false;
  }
  return true;
}

absl::StatusOr<std::vector<std::string>> Queues::NotHolding(absl::Span<const std::string> keys) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (AnyQueue(keys.subspan(i, 1))) {
      absl::StatusOr<int64_t> n = Length(keys[i]);
      if (!n.ok()) return n.status();
      if (*n > 0) continue;
    }
    rest.push_back(keys[i]);
  }
  return rest;
}

int64_t Queues::AddWaiter(const std::string& key, std::function<bool()> release) {
  absl::MutexLock lock(&mu_);
  const int64_t id = next_waiter_++;
  waiters_[key].push_back(Waiter{id, std::make_shared<std::function<bool()>>(std::move(release))});
  ++waiter_count_;
  return id;
}

void Queues::RemoveWaiter(const std::string& key, int64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  for (auto w = it->second.begin(); w != it->second.end(); ++w) {
    if (w->id == id) {
      it->second.erase(w);
      --waiter_count_;
      break;
    }
  }
  if (it->second.empty()) waiters_.erase(it);
}

size_t Queues::waiters() const {
  absl::MutexLock lock(&mu_);
  return waiter_count_;
}

void Queues::KeysSet(absl::Span<const std::string> keys) {
  if (!AnyQueue(keys)) return;  // The common case: one lookup under one lock.
  for (size_t i = 0; i < keys.size(); ++i) {
    if (AnyQueue(keys.subspan(i, 1))) Release(keys[i], /*all=*/true);
  }
}

void Queues::Release(const std::string& name, bool all) {
  std::vector<Waiter> candidates;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiters_.find(name);
    if (it == waiters_.end()) return;
    candidates.assign(it->second.begin(), it->second.end());
  }
  // Outside the lock: a release writes to its client's connection.
  for (const Waiter& w : candidates) {
    if (!(*w.release)()) continue;
    RemoveWaiter(name, w.id);
    if (!all) return;
  }
}

}  // namespace meshrun::agent::tcpstore
