#include "rendezvous/kv_store.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace meshrun::rendezvous {

KvStore::KvStore(std::string label, DeadlineTimer* timer) : label_(std::move(label)), timer_(timer) {}

void KvStore::Run(Fire& fire) {
  for (auto& [cb, result] : fire) cb(std::move(result));
}

std::vector<std::string> KvStore::ValuesLocked(int64_t round, const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(data_.at(Key{round, k}));
  return out;
}

void KvStore::SetLocked(int64_t round, const std::string& key, std::string value, Fire& fire) {
  Key k{round, key};
  bool is_new = !data_.contains(k);
  data_[k] = std::move(value);
  if (!is_new) return;
  auto it = waiting_on_.find(k);
  if (it == waiting_on_.end()) return;
  std::vector<WaiterId> ids = std::move(it->second);
  waiting_on_.erase(it);
  for (WaiterId id : ids) {
    auto w = waiters_.find(id);
    if (w == waiters_.end()) continue;
    if (--w->second.missing > 0) continue;
    timer_->Cancel(w->second.timer_id);
    fire.emplace_back(std::move(w->second.done), ValuesLocked(round, w->second.keys));
    waiters_.erase(w);
  }
}

void KvStore::Set(int64_t round, const std::string& key, std::string value) {
  Fire fire;
  {
    absl::MutexLock lock(&mu_);
    SetLocked(round, key, std::move(value), fire);
  }
  Run(fire);
}

absl::Status KvStore::MultiSet(int64_t round, const std::vector<std::string>& keys,
                               std::vector<std::string> values) {
  if (keys.size() != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("multi_set: ", keys.size(), " keys but ", values.size(), " values"));
  }
  Fire fire;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < keys.size(); ++i) SetLocked(round, keys[i], std::move(values[i]), fire);
  }
  Run(fire);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> KvStore::Add(int64_t round, const std::string& key, int64_t delta) {
  Fire fire;
  int64_t result = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = data_.find(Key{round, key});
    int64_t current = 0;
    if (it != data_.end() && !absl::SimpleAtoi(it->second, &current)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "add: key '", key, "' holds a value that is not an integer"));
    }
    result = current + delta;
    SetLocked(round, key, absl::StrCat(result), fire);
  }
  Run(fire);
  return result;
}

std::pair<std::string, bool> KvStore::CompareSet(int64_t round, const std::string& key,
                                                 const std::string& expected, std::string desired) {
  Fire fire;
  std::pair<std::string, bool> out;
  {
    absl::MutexLock lock(&mu_);
    auto it = data_.find(Key{round, key});
    bool match = (it == data_.end()) ? expected.empty() : it->second == expected;
    if (match) {
      out = {desired, true};
      SetLocked(round, key, std::move(desired), fire);
    } else {
      // c10d: an absent key with a non-empty expectation returns `expected`.
      out = {it == data_.end() ? expected : it->second, false};
    }
  }
  Run(fire);
  return out;
}

bool KvStore::Check(int64_t round, const std::vector<std::string>& keys) {
  absl::MutexLock lock(&mu_);
  return std::all_of(keys.begin(), keys.end(),
                     [&](const std::string& k) { return data_.contains(Key{round, k}); });
}

bool KvStore::Delete(int64_t round, const std::string& key) {
  absl::MutexLock lock(&mu_);
  return data_.erase(Key{round, key}) > 0;
}

KvStore::WaiterId KvStore::Await(int64_t round, std::vector<std::string> keys, absl::Duration wait,
                                 ValuesCallback done) {
  absl::StatusOr<std::vector<std::string>> immediate;
  {
    absl::MutexLock lock(&mu_);
    size_t missing = 0;
    std::vector<std::string> absent;
    for (const auto& k : keys) {
      if (!data_.contains(Key{round, k})) {
        ++missing;
        if (absent.size() < 8) absent.push_back(k);
      }
    }
    if (missing == 0) {
      immediate = ValuesLocked(round, keys);
    } else if (wait <= absl::ZeroDuration()) {
      immediate = absl::NotFoundError(absl::StrCat("key(s) not set: ", absl::StrJoin(absent, ", ")));
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

void KvStore::Close(const std::string& why) { AbortBelow(INT64_MAX, why); }

void KvStore::DropRoundsBelow(int64_t round) {
  AbortBelow(round, absl::StrCat("run '", label_, "' moved to round ", round));
}

void KvStore::AbortBelow(int64_t round, const std::string& why) {
  std::vector<ValuesCallback> cbs;
  {
    absl::MutexLock lock(&mu_);
    std::vector<WaiterId> ids;
    for (const auto& [id, w] : waiters_) {
      if (w.round < round) ids.push_back(id);
    }
    for (WaiterId id : ids) {
      auto it = waiters_.find(id);
      timer_->Cancel(it->second.timer_id);
      cbs.push_back(std::move(it->second.done));
      RemoveWaiterLocked(id);
    }
    absl::erase_if(data_, [round](const auto& kv) { return kv.first.round < round; });
  }
  for (auto& cb : cbs) cb(absl::AbortedError(why));
}

int64_t KvStore::bytes() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& [k, v] : data_) n += static_cast<int64_t>(k.key.size() + v.size());
  return n;
}

int64_t KvStore::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(data_.size());
}

}  // namespace meshrun::rendezvous
