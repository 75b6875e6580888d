#include "rendezvous/store/kv_store.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/store.h"

namespace meshrun::rendezvous {

KvStore::KvStore(std::string label, DeadlineTimer* timer, const ServerLimits& limits,
                 std::shared_ptr<std::atomic<int64_t>> server_bytes, MemoryBudget* budget)
    : label_(std::move(label)),
      timer_(timer),
      limits_(limits),
      server_bytes_(server_bytes ? std::move(server_bytes) : std::make_shared<std::atomic<int64_t>>(0)),
      budget_(budget) {}

KvStore::~KvStore() {
  // Answers still held (writes not saved yet): nobody is left to answer
  // from; the callers hear that the run is gone.
  Ready ready;
  for (auto& [seq, answer] : held_) {
    ready.emplace_back(std::move(answer), absl::UnavailableError(absl::StrCat(
                                              "run '", label_.substr(0, 64), "' was removed before its write was saved")));
  }
  held_.clear();
  Deliver(ready);
  absl::MutexLock lock(&mu_);
  server_bytes_->fetch_sub(bytes_);
  if (budget_ != nullptr) {
    budget_->Release(HeldKind::kStoreKey, charged_keys_, charged_key_bytes_);
    budget_->Release(HeldKind::kParkedWait, static_cast<int64_t>(waiters_.size()),
                     static_cast<int64_t>(waiters_.size()) * kParkedWaitCost);
  }
}

void KvStore::SyncKeyChargeLocked() {
  if (budget_ == nullptr) return;
  const int64_t keys = static_cast<int64_t>(data_.size());
  const int64_t bytes = keys * kStoreKeyCost + bytes_ + records_.bytes();
  if (keys == charged_keys_ && bytes == charged_key_bytes_) return;
  const int64_t more_keys = keys - charged_keys_;
  const int64_t more_bytes = bytes - charged_key_bytes_;
  // Up (restored keys: charged, never refused) or down (erased or shrunk).
  if (more_keys > 0 || more_bytes > 0) {
    budget_->ForceCharge(HeldKind::kStoreKey, std::max<int64_t>(more_keys, 0), std::max<int64_t>(more_bytes, 0));
  }
  if (more_keys < 0 || more_bytes < 0) {
    budget_->Release(HeldKind::kStoreKey, std::max<int64_t>(-more_keys, 0), std::max<int64_t>(-more_bytes, 0));
  }
  charged_keys_ = keys;
  charged_key_bytes_ = bytes;
}

absl::Status KvStore::CheckWritesLocked(int64_t round,
                                        const std::vector<std::pair<const std::string*, size_t>>& writes) {
  int64_t new_keys = 0;
  int64_t delta = 0;
  for (const auto& [key, value_size] : writes) {
    if (absl::Status s = CheckLength("key", *key, limits_.max_key_bytes, "max_key_bytes"); !s.ok()) return s;
    if (RequestRecords::IsRecordKey(*key)) {
      return absl::InvalidArgumentError(absl::StrCat("key '", Shown(*key),
                                                     "': keys that start with byte 0xFF are the server's own"));
    }
    if (static_cast<int64_t>(value_size) > limits_.max_value_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("value of ", value_size, " bytes for key '", key->substr(0, 64),
                                                     "' is larger than max_value_bytes=", limits_.max_value_bytes));
    }
    auto it = data_.find(Key{round, *key});
    if (it == data_.end()) {
      ++new_keys;
      delta += static_cast<int64_t>(key->size() + value_size);
    } else {
      delta += static_cast<int64_t>(value_size) - static_cast<int64_t>(it->second.size());
    }
  }
  const int64_t held_keys = static_cast<int64_t>(data_.size()) - record_keys_;
  const int64_t held_bytes = bytes_ - record_bytes_;
  if (held_keys + new_keys > limits_.max_keys_per_run) {
    return absl::ResourceExhaustedError(absl::StrCat("run '", label_.substr(0, 64), "' store holds ", held_keys,
                                                     " keys; ", new_keys, " more exceed max_keys_per_run=",
                                                     limits_.max_keys_per_run));
  }
  if (held_bytes + delta > limits_.max_store_bytes_per_run) {
    return absl::ResourceExhaustedError(absl::StrCat("run '", label_.substr(0, 64), "' store holds ", held_bytes,
                                                     " bytes; ", delta, " more exceed max_store_bytes_per_run=",
                                                     limits_.max_store_bytes_per_run));
  }
  if (delta > 0 && server_bytes_->load() + delta > limits_.max_store_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("the server's stores hold ", server_bytes_->load(), " bytes; ",
                                                     delta, " more exceed max_store_bytes=",
                                                     limits_.max_store_bytes));
  }
  const int64_t charge = new_keys * kStoreKeyCost + std::max<int64_t>(delta, 0);
  if (budget_ != nullptr && charge > 0) {
    if (absl::Status s = budget_->Charge(HeldKind::kStoreKey, new_keys, charge, claimant(),
                                         absl::StrCat(new_keys, " new store key(s) in run '", label_.substr(0, 64), "'"));
        !s.ok()) {
      return s;
    }
    charged_keys_ += new_keys;
    charged_key_bytes_ += charge;
  }
  return absl::OkStatus();
}

void KvStore::EraseLocked(absl::flat_hash_map<Key, std::string>::iterator it) {
  const int64_t n = static_cast<int64_t>(it->first.key.size() + it->second.size());
  bytes_ -= n;
  if (RequestRecords::IsRecordKey(it->first.key)) {
    --record_keys_;
    record_bytes_ -= n;
  }
  server_bytes_->fetch_sub(n);
  data_.erase(it);
}

void KvStore::Run(Fire& fire) {
  for (auto& [cb, result] : fire) cb(std::move(result));
}

absl::Status KvStore::CheckWriteOnceLocked(int64_t round, const std::string& key, const std::string* value,
                                           absl::string_view op) const {
  if (!IsWriteOnceKey(key)) return absl::OkStatus();
  auto it = data_.find(Key{round, key});
  if (it == data_.end() || (value != nullptr && it->second == *value)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(op, ": key '", key.substr(0, 128), "' is write-once (keys under '",
                                                    kWriteOncePrefix, "' never change once set) and already holds ",
                                                    value == nullptr ? "a value" : "another value", " in round ",
                                                    round));
}

std::vector<std::string> KvStore::ValuesLocked(int64_t round, const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(data_.at(Key{round, k}));
  return out;
}

void KvStore::SetLocked(int64_t round, const std::string& key, std::string value, Fire& fire) {
  Key k{round, key};
  auto [slot, is_new] = data_.try_emplace(k);
  const int64_t delta = static_cast<int64_t>(value.size()) -
                        (is_new ? -static_cast<int64_t>(key.size()) : static_cast<int64_t>(slot->second.size()));
  bytes_ += delta;
  server_bytes_->fetch_add(delta);
  if (RequestRecords::IsRecordKey(key)) {
    record_keys_ += is_new ? 1 : 0;
    record_bytes_ += delta;
  }
  slot->second = std::move(value);
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
    if (budget_ != nullptr) budget_->Release(HeldKind::kParkedWait, 1, kParkedWaitCost);
  }
}

template <typename T>
KvStore::Answer KvStore::Give(ResultCallback<T> done, T result, Fire fire) {
  return [done = std::move(done), result = std::move(result), fire = std::move(fire)](
             const absl::Status& failure) mutable {
    if (!failure.ok()) {
      for (auto& f : fire) f.second = failure;
      Run(fire);
      done(failure);
      return;
    }
    Run(fire);
    done(std::move(result));
  };
}

KvStore::Answer KvStore::Give(StatusCallback done, Fire fire) {
  return [done = std::move(done), fire = std::move(fire)](const absl::Status& failure) mutable {
    if (!failure.ok()) {
      for (auto& f : fire) f.second = failure;
    }
    Run(fire);
    done(failure);
  };
}

void KvStore::Set(int64_t round, const std::string& key, std::string value, StatusCallback done) {
  Ready ready;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    refused = ClosedLocked();
    if (refused.ok()) refused = CheckWriteOnceLocked(round, key, &value, "set");
    if (refused.ok()) refused = CheckWritesLocked(round, {{&key, value.size()}});
    if (refused.ok() && write_hook_) refused = SaveLocked(round, {{key, value}}, {});
    if (refused.ok()) {
      Fire fire;
      SetLocked(round, key, std::move(value), fire);
      AnswerLocked(Give(std::move(done), std::move(fire)), ready);
    }
    SyncKeyChargeLocked();
  }
  if (!refused.ok()) return done(refused);
  Deliver(ready);
}

void KvStore::MultiSet(int64_t round, const std::vector<std::string>& keys, std::vector<std::string> values,
                       StatusCallback done) {
  if (keys.size() != values.size()) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("multi_set: ", keys.size(), " keys but ", values.size(), " values")));
  }
  Ready ready;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    refused = ClosedLocked();
    std::vector<std::pair<const std::string*, size_t>> writes;
    writes.reserve(keys.size());
    absl::flat_hash_map<absl::string_view, const std::string*> once;  // Write-once keys of this request.
    for (size_t i = 0; i < keys.size() && refused.ok(); ++i) {
      refused = CheckWriteOnceLocked(round, keys[i], &values[i], "multi_set");
      if (refused.ok() && IsWriteOnceKey(keys[i])) {
        auto [it, fresh] = once.emplace(keys[i], &values[i]);
        if (!fresh && *it->second != values[i]) {
          refused = absl::FailedPreconditionError(absl::StrCat("multi_set: write-once key '", keys[i].substr(0, 128),
                                                               "' is given two different values"));
        }
      }
      writes.emplace_back(&keys[i], values[i].size());
    }
    if (refused.ok()) refused = CheckWritesLocked(round, writes);
    if (refused.ok() && write_hook_) {
      std::vector<std::pair<std::string, std::string>> set;
      set.reserve(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) set.emplace_back(keys[i], values[i]);
      refused = SaveLocked(round, std::move(set), {});
    }
    if (refused.ok()) {
      Fire fire;
      for (size_t i = 0; i < keys.size(); ++i) SetLocked(round, keys[i], std::move(values[i]), fire);
      AnswerLocked(Give(std::move(done), std::move(fire)), ready);
    }
    SyncKeyChargeLocked();
  }
  if (!refused.ok()) return done(refused);
  Deliver(ready);
}

void KvStore::Add(int64_t round, const std::string& key, int64_t delta, ResultCallback<int64_t> done,
                  const std::string& request_id) {
  Ready ready;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    refused = ClosedLocked();
    if (refused.ok() && !request_id.empty()) refused = RequestRecords::CheckRequestId(request_id);
    // An add of 0 is a read: no record, a repeat reads again.
    const std::string& id = delta == 0 ? std::string() : request_id;
    std::optional<std::string> earlier;
    if (refused.ok() && !id.empty()) {
      absl::StatusOr<std::optional<std::string>> r = RecordedLocked(round, id, RequestRecords::Op::kAdd, key);
      if (r.ok()) {
        earlier = std::move(*r);
      } else {
        refused = r.status();
      }
    }
    int64_t current = 0;
    int64_t result = 0;
    auto it = data_.find(Key{round, key});
    // A repeat is answered from its record whatever the key holds now.
    if (refused.ok() && !earlier && it != data_.end() && !absl::SimpleAtoi(it->second, &current)) {
      refused = absl::FailedPreconditionError(
          absl::StrCat("add: key '", key.substr(0, 64), "' holds a value that is not an integer"));
    }
    if (refused.ok() && !earlier && __builtin_add_overflow(current, delta, &result)) {
      refused = absl::InvalidArgumentError(absl::StrCat("add: key '", key.substr(0, 64), "' holds ", current,
                                                        "; adding ", delta, " overflows a 64-bit integer"));
    }
    std::string text = absl::StrCat(result);
    if (refused.ok() && earlier) {
      int64_t answer = 0;
      if (!absl::SimpleAtoi(*earlier, &answer)) {
        refused = absl::InternalError(absl::StrCat("add: the record of request_id '", Shown(id), "' is damaged"));
      } else {
        AnswerLocked(Give(std::move(done), answer), ready);
      }
    } else {
      if (refused.ok()) refused = CheckWriteOnceLocked(round, key, &text, "add");
      Fire fire;
      if (refused.ok()) refused = WriteRecordedLocked(round, key, text, id, RequestRecords::Op::kAdd, text, fire);
      if (refused.ok()) AnswerLocked(Give(std::move(done), result, std::move(fire)), ready);
    }
    SyncKeyChargeLocked();
  }
  if (!refused.ok()) return done(refused);
  Deliver(ready);
}

void KvStore::CompareSet(int64_t round, const std::string& key, const std::string& expected, std::string desired,
                         ResultCallback<std::pair<std::string, bool>> done, const std::string& request_id) {
  Ready ready;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    refused = ClosedLocked();
    std::optional<std::string> earlier;
    if (refused.ok() && !request_id.empty()) {
      absl::StatusOr<std::optional<std::string>> r =
          RecordedLocked(round, request_id, RequestRecords::Op::kCompareSet, key);
      if (r.ok()) {
        earlier = std::move(*r);
      } else {
        refused = r.status();
      }
    }
    auto it = data_.find(Key{round, key});
    const bool match = (it == data_.end()) ? expected.empty() : it->second == expected;
    if (refused.ok() && earlier) {
      // Recorded only when it swapped: its answer is the value it set, which the repeat carries.
      AnswerLocked(Give(std::move(done), std::pair<std::string, bool>{std::move(desired), true}), ready);
    } else if (refused.ok() && !match) {
      // A read. c10d: an absent key with a non-empty expectation returns `expected`.
      std::pair<std::string, bool> out{it == data_.end() ? expected : it->second, false};
      AnswerLocked(Give(std::move(done), std::move(out)), ready);
    } else if (refused.ok()) {
      refused = CheckWriteOnceLocked(round, key, &desired, "compare_set");
      Fire fire;
      if (refused.ok()) {
        refused = WriteRecordedLocked(round, key, desired, request_id, RequestRecords::Op::kCompareSet, "", fire);
      }
      if (refused.ok()) {
        std::pair<std::string, bool> out{std::move(desired), true};
        AnswerLocked(Give(std::move(done), std::move(out), std::move(fire)), ready);
      }
      SyncKeyChargeLocked();
    }
  }
  if (!refused.ok()) return done(refused);
  Deliver(ready);
}

void KvStore::Check(int64_t round, const std::vector<std::string>& keys, ResultCallback<bool> done) {
  Ready ready;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    refused = ClosedLocked();
    if (refused.ok()) {
      const bool all = std::all_of(keys.begin(), keys.end(),
                                   [&](const std::string& k) { return data_.contains(Key{round, k}); });
      AnswerLocked(Give(std::move(done), all), ready);
    }
  }
  if (!refused.ok()) return done(refused);
  Deliver(ready);
}

void KvStore::Keys(int64_t round, const std::string& prefix, int64_t max_keys, ResultCallback<KeyList> done) {
  Ready ready;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    refused = ClosedLocked();
    if (refused.ok()) {
      KeyList list;
      for (const auto& [k, v] : data_) {
        if (k.round != round || !absl::StartsWith(k.key, prefix) || RequestRecords::IsRecordKey(k.key)) continue;
        ++list.count;
        if (max_keys > 0 && list.count <= max_keys) list.keys.push_back(k.key);
      }
      if (max_keys > 0 && list.count > max_keys) {
        refused = absl::ResourceExhaustedError(absl::StrCat(list.count, " keys of round ", round, " start with '",
                                                            prefix.substr(0, 128), "', more than the ", max_keys,
                                                            " asked for"));
      } else {
        AnswerLocked(Give(std::move(done), std::move(list)), ready);
      }
    }
  }
  if (!refused.ok()) return done(refused);
  Deliver(ready);
}

void KvStore::Delete(int64_t round, const std::string& key, ResultCallback<bool> done) {
  Ready ready;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    refused = ClosedLocked();
    auto it = data_.find(Key{round, key});
    if (refused.ok() && it == data_.end()) {
      AnswerLocked(Give(std::move(done), false), ready);  // A read: nothing to delete.
    } else if (refused.ok()) {
      refused = CheckWriteOnceLocked(round, key, nullptr, "delete");
      if (refused.ok() && RequestRecords::IsRecordKey(key)) {
        refused = absl::InvalidArgumentError(
            absl::StrCat("delete: key '", Shown(key), "': keys that start with byte 0xFF are the server's own"));
      }
      if (refused.ok() && write_hook_) refused = SaveLocked(round, {}, {key});
      if (refused.ok()) {
        EraseLocked(it);
        SyncKeyChargeLocked();
        AnswerLocked(Give(std::move(done), true), ready);
      }
    }
  }
  if (!refused.ok()) return done(refused);
  Deliver(ready);
}

void KvStore::Close(const std::string& why) {
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    closed_ = why;
    FailHeldLocked(absl::UnavailableError(why), ready);
  }
  Deliver(ready);
  AbortBelow(INT64_MAX, why);
}

absl::Status KvStore::ClosedLocked() const {
  return closed_.has_value() ? absl::UnavailableError(*closed_) : absl::OkStatus();
}

void KvStore::DropRoundsBelow(int64_t round) {
  AbortBelow(round, absl::StrCat("run '", label_, "' moved to round ", round));
  if (drop_hook_) drop_hook_(round);
}

void KvStore::Restore(int64_t round, const std::string& key, std::string value) {
  Fire fire;
  {
    absl::MutexLock lock(&mu_);
    if (RequestRecords::IsRecordKey(key) && !data_.contains(Key{round, key})) {
      records_.Restored(round, key, RequestRecords::WrittenAt(value).value_or(absl::Now()));
    }
    SetLocked(round, key, std::move(value), fire);
    SyncKeyChargeLocked();
  }
  Run(fire);
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
    for (auto it = data_.begin(); it != data_.end();) {
      auto here = it++;
      if (here->first.round < round) EraseLocked(here);
    }
    records_.DropBelow(round);
    SyncKeyChargeLocked();
  }
  for (auto& cb : cbs) cb(absl::AbortedError(why));
}

int64_t KvStore::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

int64_t KvStore::waiters() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(waiters_.size());
}

int64_t KvStore::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(data_.size()) - record_keys_;
}

int64_t KvStore::request_records() const {
  absl::MutexLock lock(&mu_);
  return record_keys_;
}

}  // namespace meshrun::rendezvous
