// KvStore: parked reads - waiting for keys, their deadlines and cancels
// (kv_store.h, Await).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/store.h"
#include "rendezvous/store/kv_store.h"

namespace meshrun::rendezvous {

KvStore::WaiterId KvStore::Await(int64_t round, std::vector<std::string> keys, absl::Duration wait,
                                 ValuesCallback done) {
  absl::StatusOr<std::vector<std::string>> immediate;
  {
    absl::ReleasableMutexLock lock(&mu_);
    absl::Status refused = ClosedLocked();
    if (!refused.ok()) {
    } else if (static_cast<int64_t>(keys.size()) > limits_.max_keys_per_run) {
      refused = absl::InvalidArgumentError(absl::StrCat("a read of ", keys.size(),
                                                        " keys exceeds max_keys_per_run=", limits_.max_keys_per_run));
    } else if (wait > limits_.max_wait) {
      refused = absl::InvalidArgumentError(absl::StrCat("wait of ", absl::FormatDuration(wait),
                                                        " exceeds max_wait=", absl::FormatDuration(limits_.max_wait)));
    } else if (wait > absl::ZeroDuration() && static_cast<int64_t>(waiters_.size()) >= limits_.max_waiters_per_run) {
      refused = absl::ResourceExhaustedError(absl::StrCat("run '", label_.substr(0, 64), "' has ", waiters_.size(),
                                                          " store reads waiting: max_waiters_per_run=",
                                                          limits_.max_waiters_per_run));
    }
    for (const auto& k : keys) {
      if (!refused.ok()) break;
      refused = CheckLength("key", k, limits_.max_key_bytes, "max_key_bytes");
    }
    if (!refused.ok()) {
      lock.Release();
      done(refused);
      return 0;
    }
    size_t missing = 0;
    std::vector<std::string> absent;
    for (const auto& k : keys) {
      if (!data_.contains(Key{round, k})) {
        ++missing;
        if (absent.size() < 8) absent.push_back(k);
      }
    }
    if (missing == 0 || wait <= absl::ZeroDuration()) {
      // A read: answered once every write it may have seen is saved.
      absl::StatusOr<std::vector<std::string>> values =
          missing == 0 ? absl::StatusOr<std::vector<std::string>>(ValuesLocked(round, keys))
                       : absl::NotFoundError(absl::StrCat("key(s) not set: ", absl::StrJoin(absent, ", ")));
      Ready ready;
      AnswerLocked(
          [done = std::move(done), values = std::move(values)](const absl::Status& failure) mutable {
            if (failure.ok()) {
              done(std::move(values));
            } else {
              done(failure);
            }
          },
          ready);
      lock.Release();
      Deliver(ready);
      return 0;
    } else if (absl::Status s = budget_ == nullptr ? absl::OkStatus()
                                : budget_->Charge(HeldKind::kParkedWait, 1, kParkedWaitCost, claimant(),
                                                  absl::StrCat("a parked store read in run '", label_.substr(0, 64), "'"));
               !s.ok()) {
      immediate = std::move(s);
    } else {
      WaiterId id = next_waiter_++;
      for (const auto& k : keys) {
        Key key{round, k};
        if (!data_.contains(key)) waiting_on_[key].push_back(id);
      }
      DeadlineTimer::Id tid = 0;
      if (wait != absl::InfiniteDuration()) {
        std::weak_ptr<KvStore> weak = weak_from_this();
        tid = timer_->Schedule(absl::Now() + wait, [weak, id] {
          if (auto self = weak.lock()) self->Expire(id);
        });
      }
      waiters_.emplace(id, Waiter{round, std::move(keys), missing, tid, std::move(done)});
      return id;
    }
  }
  done(std::move(immediate));
  return 0;
}

void KvStore::RemoveWaiterLocked(WaiterId id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  for (const auto& k : it->second.keys) {
    auto w = waiting_on_.find(Key{it->second.round, k});
    if (w == waiting_on_.end()) continue;
    auto& ids = w->second;
    ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
    if (ids.empty()) waiting_on_.erase(w);
  }
  waiters_.erase(it);
  if (budget_ != nullptr) budget_->Release(HeldKind::kParkedWait, 1, kParkedWaitCost);
}

void KvStore::Expire(WaiterId id) {
  ValuesCallback cb;
  std::string msg;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    std::vector<std::string> absent;
    for (const auto& k : it->second.keys) {
      if (!data_.contains(Key{it->second.round, k}) && absent.size() < 8) absent.push_back(k);
    }
    msg = absl::StrCat("timed out waiting for key(s) ", absl::StrJoin(absent, ", "),
                       " in run '", label_, "' round ", it->second.round);
    cb = std::move(it->second.done);
    RemoveWaiterLocked(id);
  }
  cb(absl::DeadlineExceededError(msg));
}

void KvStore::Cancel(WaiterId id) {
  ValuesCallback cb;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    timer_->Cancel(it->second.timer_id);
    cb = std::move(it->second.done);
    RemoveWaiterLocked(id);
  }
  cb(absl::CancelledError("store wait cancelled by the client"));
}

}  // namespace meshrun::rendezvous
