// KvStore: answers held until the writes they saw are saved (kv_store.h,
// SetDurability), and the waiting forms of the store's calls.
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "rendezvous/store/kv_store.h"

namespace meshrun::rendezvous {
namespace {

// Calls `start` with a callback and waits for the answer it receives.
template <typename Result, typename Start>
Result WaitFor(Start start) {
  absl::Notification answered;
  std::optional<Result> out;
  start([&](Result r) {
    out.emplace(std::move(r));
    answered.Notify();
  });
  answered.WaitForNotification();
  return std::move(*out);
}

}  // namespace

absl::Status KvStore::SaveLocked(int64_t round, std::vector<std::pair<std::string, std::string>> set,
                                 std::vector<std::string> erase) {
  const uint64_t seq = applied_ + 1;
  std::weak_ptr<KvStore> weak = weak_from_this();
  absl::StatusOr<bool> saved = write_hook_(round, set, erase, [weak, seq](absl::Status s) {
    if (std::shared_ptr<KvStore> self = weak.lock()) self->Saved(seq, s);
  });
  if (!saved.ok()) return saved.status();
  applied_ = seq;
  if (*saved && saved_ == seq - 1) saved_ = seq;
  return absl::OkStatus();
}

void KvStore::AnswerLocked(Answer answer, Ready& ready) {
  if (saved_ >= applied_) {
    ready.emplace_back(std::move(answer), absl::OkStatus());
  } else {
    held_.emplace_back(applied_, std::move(answer));
  }
}

void KvStore::Saved(uint64_t seq, const absl::Status& status) {
  Ready ready;
  std::string closed;
  {
    absl::MutexLock lock(&mu_);
    if (status.ok()) {
      if (seq > saved_) saved_ = seq;
      while (!held_.empty() && held_.front().first <= saved_) {
        ready.emplace_back(std::move(held_.front().second), absl::OkStatus());
        held_.pop_front();
      }
    } else if (!closed_.has_value()) {
      // What the store holds includes a write etcd may not have: nothing
      // is answered from it any more.
      closed_ = absl::StrCat("run '", label_.substr(0, 64), "': ", status.message());
      closed = *closed_;
      FailHeldLocked(absl::UnavailableError(closed), ready);
    }
  }
  Deliver(ready);
  if (!closed.empty()) AbortBelow(INT64_MAX, closed);
}

void KvStore::FailHeldLocked(const absl::Status& why, Ready& ready) {
  for (auto& [seq, answer] : held_) ready.emplace_back(std::move(answer), why);
  held_.clear();
}

void KvStore::Deliver(Ready& ready) {
  for (auto& [answer, status] : ready) answer(status);
}

absl::Status KvStore::Set(int64_t round, const std::string& key, std::string value) {
  return WaitFor<absl::Status>(
      [&](StatusCallback done) { Set(round, key, std::move(value), std::move(done)); });
}

absl::Status KvStore::MultiSet(int64_t round, const std::vector<std::string>& keys,
                               std::vector<std::string> values) {
  return WaitFor<absl::Status>(
      [&](StatusCallback done) { MultiSet(round, keys, std::move(values), std::move(done)); });
}

absl::StatusOr<int64_t> KvStore::Add(int64_t round, const std::string& key, int64_t delta,
                                     const std::string& request_id) {
  return WaitFor<absl::StatusOr<int64_t>>(
      [&](ResultCallback<int64_t> done) { Add(round, key, delta, std::move(done), request_id); });
}

absl::StatusOr<std::pair<std::string, bool>> KvStore::CompareSet(int64_t round, const std::string& key,
                                                                 const std::string& expected, std::string desired,
                                                                 const std::string& request_id) {
  return WaitFor<absl::StatusOr<std::pair<std::string, bool>>>(
      [&](ResultCallback<std::pair<std::string, bool>> done) {
        CompareSet(round, key, expected, std::move(desired), std::move(done), request_id);
      });
}

absl::StatusOr<bool> KvStore::Check(int64_t round, const std::vector<std::string>& keys) {
  return WaitFor<absl::StatusOr<bool>>([&](ResultCallback<bool> done) { Check(round, keys, std::move(done)); });
}

absl::StatusOr<KvStore::KeyList> KvStore::Keys(int64_t round, const std::string& prefix, int64_t max_keys) {
  return WaitFor<absl::StatusOr<KeyList>>(
      [&](ResultCallback<KeyList> done) { Keys(round, prefix, max_keys, std::move(done)); });
}

absl::StatusOr<bool> KvStore::Delete(int64_t round, const std::string& key) {
  return WaitFor<absl::StatusOr<bool>>([&](ResultCallback<bool> done) { Delete(round, key, std::move(done)); });
}

}  // namespace meshrun::rendezvous
