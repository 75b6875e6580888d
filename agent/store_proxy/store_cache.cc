#include "agent/store_proxy/store_cache.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/store.h"

namespace meshrun::agent {
namespace {

template <typename T>
void Erase(std::vector<T>& v, const T& x) {
  v.erase(std::remove(v.begin(), v.end(), x), v.end());
}

}  // namespace

StoreCache::StoreCache(StoreUpstream* upstream, StoreCacheOptions options)
    : upstream_(upstream), options_(std::move(options)) {}

int64_t StoreCache::round() const {
  absl::MutexLock lock(&mu_);
  return round_;
}

StoreCacheStats StoreCache::stats() const {
  absl::MutexLock lock(&mu_);
  StoreCacheStats s = stats_;
  s.cached_keys = static_cast<int64_t>(values_.size());
  return s;
}

StoreCache::FetchId StoreCache::NewFetchLocked(ReadId creator, StoreRequest request, absl::Time deadline,
                                               bool indexed, std::vector<Start>& starts) {
  const FetchId id = next_id_++;
  Fetch& f = fetches_[id];
  f.round = request.round;
  f.keys = request.keys;
  for (size_t i = 0; i < request.set_keys.size() && i < request.set_values.size(); ++i) {
    if (!IsWriteOnceKey(request.set_keys[i])) continue;
    f.set_keys.push_back(request.set_keys[i]);
    f.set_values.push_back(request.set_values[i]);
  }
  f.deadline = deadline;
  f.creator = creator;
  f.indexed = indexed;
  f.needers.push_back(creator);
  if (indexed) {
    for (const auto& k : f.keys) inflight_[k].push_back(id);
  }
  ++stats_.upstream_requests;
  starts.push_back(Start{id, std::move(request)});
  return id;
}

void StoreCache::UnindexLocked(FetchId id, const Fetch& f) {
  if (!f.indexed) return;
  for (const auto& k : f.keys) {
    auto it = inflight_.find(k);
    if (it == inflight_.end()) continue;
    Erase(it->second, id);
    if (it->second.empty()) inflight_.erase(it);
  }
}

StoreCache::ReadId StoreCache::Submit(StoreRequest request, Done done) {
  std::vector<Start> starts;
  std::vector<FetchId> cancel;
  Ready ready;
  ReadId id = 0;
  {
    absl::MutexLock lock(&mu_);
    ++stats_.requests;
    if (static_cast<int64_t>(waiters_.size()) >= options_.max_waiters) {
      ready.emplace_back(std::move(done), absl::ResourceExhaustedError(absl::StrCat(
                                              "store proxy holds ", waiters_.size(),
                                              " requests: store_proxy_max_waiters=", options_.max_waiters)));
    } else {
      const absl::Time now = absl::Now();
      id = next_id_++;
      Waiter& w = waiters_[id];
      w.round = request.round;
      w.keys = request.keys;
      w.values.resize(w.keys.size());
      w.missing = w.keys.size();
      w.deadline = request.wait == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                            : now + std::max(request.wait, absl::ZeroDuration());
      w.done = std::move(done);
      w.coalesced = round_ >= 0 && request.round == round_ && !request.keys.empty() &&
                    std::all_of(request.keys.begin(), request.keys.end(),
                                [](const std::string& k) { return IsWriteOnceKey(k); });
      if (!w.coalesced) {
        ++stats_.passed_through;
        const absl::Time deadline = w.deadline;
        const FetchId f = NewFetchLocked(id, std::move(request), deadline, /*indexed=*/false, starts);
        w.fetches.push_back(f);
        w.sets_fetch = f;
      } else {
        for (size_t i = 0; i < w.keys.size(); ++i) {
          auto v = values_.find(w.keys[i]);
          if (v == values_.end()) continue;
          w.values[i] = v->second;
          --w.missing;
          ++stats_.keys_from_cache;
        }
        // Every position of every missing key (a key may repeat): a value
        // learned fills them in O(positions), however many keys the
        // request has (a mesh's first member reads every member's).
        for (size_t i = 0; i < w.keys.size(); ++i) {
          if (!w.values[i]) wanting_[w.keys[i]].emplace_back(id, i);
        }
        ResolveLocked(id, now, &request, starts, ready, cancel);
        MaybeCompleteLocked(id, ready, cancel);
      }
    }
  }
  Flush(std::move(starts), std::move(cancel), std::move(ready));
  return id;
}

void StoreCache::ResolveLocked(ReadId id, absl::Time now, StoreRequest* sets, std::vector<Start>& starts,
                               Ready& ready, std::vector<FetchId>& cancel) {
  Waiter& w = waiters_.at(id);
  const absl::flat_hash_set<absl::string_view> wanted(w.keys.begin(), w.keys.end());
  // Keys its own fetches already read; sets, not scans: a request may
  // read thousands of keys.
  absl::flat_hash_set<absl::string_view> covered;
  for (FetchId f : w.fetches) {
    for (const std::string& k : fetches_.at(f).keys) covered.insert(k);
  }
  std::vector<std::string> fresh;
  absl::flat_hash_set<absl::string_view> fresh_set;
  for (size_t i = 0; i < w.keys.size(); ++i) {
    const std::string& k = w.keys[i];
    if (w.values[i] || fresh_set.contains(k) || covered.contains(k)) continue;
    // Join a read of `k` in flight that waits no longer than this request
    // may (its answer, or its timeout, then comes in time for this one) and
    // for nothing this request does not wait for itself: the server answers
    // a read when all its keys are there, so joining one that also waits
    // for another key would make this request wait for that key too, which
    // may be one its worker is to write only after this read (a mesh's
    // verdict, written by the first member once it has read the others).
    FetchId best = 0;
    auto in = inflight_.find(k);
    if (in != inflight_.end()) {
      for (FetchId f : in->second) {
        const Fetch& cand = fetches_.at(f);
        const absl::Time d = cand.deadline;
        if (!(now < d && d <= w.deadline) || (best != 0 && d <= fetches_.at(best).deadline)) continue;
        if (std::all_of(cand.keys.begin(), cand.keys.end(), [&](const std::string& c) { return wanted.contains(c); })) {
          best = f;
        }
      }
    }
    if (best != 0) {
      w.fetches.push_back(best);
      fetches_.at(best).needers.push_back(id);
      ++stats_.keys_coalesced;
      continue;
    }
    fresh.push_back(k);
    fresh_set.insert(w.keys[i]);
  }
  const bool has_sets = sets != nullptr && !sets->set_keys.empty();
  if (fresh.empty() && !has_sets) return;
  // Asked again after a read it joined failed: the server counts waits in
  // whole milliseconds and answers a wait of 0 at once (NOT_FOUND), so
  // less than 1 ms left is a timeout here, as it would be there.
  if (sets == nullptr && w.deadline - now < absl::Milliseconds(1)) {
    // A read it joined timed out and its own time is up too.
    std::vector<std::string> absent(fresh.begin(), fresh.begin() + std::min<size_t>(fresh.size(), 8));
    FinishLocked(id,
                 absl::DeadlineExceededError(absl::StrCat("timed out waiting for key(s) ", absl::StrJoin(absent, ", "),
                                                          " in run '", options_.label, "' round ", w.round)),
                 ready, cancel);
    return;
  }
  StoreRequest r;
  r.round = w.round;
  if (has_sets) {
    r.set_keys = std::move(sets->set_keys);
    r.set_values = std::move(sets->set_values);
  }
  r.keys = fresh;
  // Rounded up to the millisecond (the wire's unit), so a waiting read
  // never becomes an immediate one.
  r.wait = w.deadline == absl::InfiniteFuture()
               ? absl::InfiniteDuration()
               : absl::Ceil(std::max(absl::ZeroDuration(), w.deadline - now), absl::Milliseconds(1));
  const absl::Time deadline = w.deadline;
  const FetchId f = NewFetchLocked(id, std::move(r), deadline, /*indexed=*/!fresh.empty(), starts);
  Waiter& again = waiters_.at(id);
  again.fetches.push_back(f);
  if (has_sets) again.sets_fetch = f;
}

void StoreCache::LearnLocked(const std::string& key, const std::string& value, Ready& ready,
                             std::vector<FetchId>& cancel) {
  if (!values_.contains(key)) {
    const int64_t size = static_cast<int64_t>(key.size() + value.size());
    if (stats_.cached_bytes + size <= options_.max_cache_bytes) {
      values_.emplace(key, value);
      stats_.cached_bytes += size;
    } else {
      ++stats_.values_not_kept;
    }
  }
  auto it = wanting_.find(key);
  if (it == wanting_.end()) return;
  std::vector<std::pair<ReadId, size_t>> positions = std::move(it->second);
  wanting_.erase(it);
  for (size_t p = 0; p < positions.size(); ++p) {
    const auto [id, i] = positions[p];
    auto w = waiters_.find(id);
    if (w == waiters_.end()) continue;
    if (!w->second.values[i]) {
      w->second.values[i] = value;
      --w->second.missing;
    }
    // Once per waiter, after its last position of this key.
    if (p + 1 == positions.size() || positions[p + 1].first != id) MaybeCompleteLocked(id, ready, cancel);
  }
}

void StoreCache::MaybeCompleteLocked(ReadId id, Ready& ready, std::vector<FetchId>& cancel) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  Waiter& w = it->second;
  if (!w.coalesced || w.missing > 0 || w.sets_fetch != 0) return;
  std::vector<std::string> values;
  values.reserve(w.values.size());
  for (auto& v : w.values) values.push_back(std::move(*v));
  FinishLocked(id, std::move(values), ready, cancel);
}

void StoreCache::FinishLocked(ReadId id, absl::StatusOr<std::vector<std::string>> result, Ready& ready,
                              std::vector<FetchId>& cancel) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  Waiter w = std::move(it->second);
  waiters_.erase(it);
  for (FetchId fid : w.fetches) {
    auto f = fetches_.find(fid);
    if (f == fetches_.end()) continue;
    Erase(f->second.needers, id);
    if (f->second.creator == id) f->second.creator = 0;
    if (!f->second.needers.empty()) continue;
    // Nobody needs it any more: others must not join it, and it is cancelled.
    UnindexLocked(fid, f->second);
    f->second.indexed = false;
    if (f->second.started) {
      cancel.push_back(fid);
    } else {
      f->second.cancel_pending = true;
    }
  }
  if (w.coalesced) {
    for (size_t i = 0; i < w.keys.size(); ++i) {
      if (w.values[i]) continue;
      auto want = wanting_.find(w.keys[i]);
      if (want == wanting_.end()) continue;
      auto& v = want->second;
      v.erase(std::remove_if(v.begin(), v.end(), [id](const auto& e) { return e.first == id; }), v.end());
      if (v.empty()) wanting_.erase(want);
    }
  }
  ready.emplace_back(std::move(w.done), std::move(result));
}

void StoreCache::OnFetchDone(FetchId id, absl::StatusOr<std::vector<std::string>> result) {
  std::vector<Start> starts;
  std::vector<FetchId> cancel;
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    auto it = fetches_.find(id);
    if (it == fetches_.end()) return;
    Fetch f = std::move(it->second);
    fetches_.erase(it);
    UnindexLocked(id, f);
    if (result.ok() && result->size() != f.keys.size()) {
      result = absl::InternalError(absl::StrCat("store: the server answered ", result->size(), " values for ",
                                                f.keys.size(), " keys"));
    }
    if (result.ok() && f.round == round_) {
      for (size_t i = 0; i < f.set_keys.size(); ++i) LearnLocked(f.set_keys[i], f.set_values[i], ready, cancel);
      for (size_t i = 0; i < f.keys.size(); ++i) {
        if (IsWriteOnceKey(f.keys[i])) LearnLocked(f.keys[i], (*result)[i], ready, cancel);
      }
    }
    const absl::Time now = absl::Now();
    for (ReadId rid : f.needers) {
      auto w = waiters_.find(rid);
      if (w == waiters_.end()) continue;
      Erase(w->second.fetches, id);
      if (!w->second.coalesced) {
        FinishLocked(rid, std::move(result), ready, cancel);  // A pass-through has this one need.
        continue;
      }
      if (!result.ok() && rid == f.creator) {
        // Its own server request (its sets, its fresh keys) failed: the answer.
        FinishLocked(rid, result.status(), ready, cancel);
        continue;
      }
      if (result.ok() && w->second.sets_fetch == id) w->second.sets_fetch = 0;
      // A joined read failed (or, defensively, left keys unanswered): ask again.
      ResolveLocked(rid, now, nullptr, starts, ready, cancel);
      MaybeCompleteLocked(rid, ready, cancel);
    }
  }
  Flush(std::move(starts), std::move(cancel), std::move(ready));
}

void StoreCache::Flush(std::vector<Start> starts, std::vector<FetchId> cancel, Ready ready) {
  for (Start& s : starts) {
    const FetchId id = s.id;
    upstream_->Start(id, std::move(s.request),
                     [this, id](absl::StatusOr<std::vector<std::string>> r) { OnFetchDone(id, std::move(r)); });
    absl::MutexLock lock(&mu_);
    auto f = fetches_.find(id);
    if (f == fetches_.end()) continue;  // Answered already.
    f->second.started = true;
    if (f->second.cancel_pending) cancel.push_back(id);
  }
  for (FetchId id : cancel) upstream_->Cancel(id);
  for (auto& [done, result] : ready) done(std::move(result));
}

void StoreCache::Cancel(ReadId id) {
  std::vector<FetchId> cancel;
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    FinishLocked(id, absl::CancelledError("store request cancelled by the worker"), ready, cancel);
  }
  Flush({}, std::move(cancel), std::move(ready));
}

void StoreCache::Shutdown() {
  std::vector<FetchId> cancel;
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    std::vector<ReadId> ids;
    for (const auto& [id, w] : waiters_) ids.push_back(id);
    for (ReadId id : ids) {
      FinishLocked(id, absl::CancelledError("the store proxy is shutting down (its agent is exiting)"), ready, cancel);
    }
  }
  Flush({}, std::move(cancel), std::move(ready));
}

void StoreCache::SetRound(int64_t round) {
  std::vector<FetchId> cancel;
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    if (round <= round_) return;
    round_ = round;
    values_.clear();
    stats_.cached_bytes = 0;
    for (auto& [id, f] : fetches_) f.indexed = false;
    inflight_.clear();
    wanting_.clear();
    std::vector<ReadId> old;
    for (const auto& [id, w] : waiters_) {
      if (w.round < round) old.push_back(id);
    }
    for (ReadId id : old) {
      FinishLocked(id, absl::AbortedError(absl::StrCat("run '", options_.label, "' moved to round ", round)), ready,
                   cancel);
    }
  }
  Flush({}, std::move(cancel), std::move(ready));
}

void StoreCache::LearnWrites(int64_t round, const std::vector<std::string>& keys,
                             const std::vector<std::string>& values) {
  std::vector<FetchId> cancel;
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    if (round != round_) return;
    for (size_t i = 0; i < keys.size() && i < values.size(); ++i) {
      if (IsWriteOnceKey(keys[i])) LearnLocked(keys[i], values[i], ready, cancel);
    }
  }
  Flush({}, std::move(cancel), std::move(ready));
}

void StoreCache::LearnCompareSet(int64_t round, const std::string& key, const std::string& expected,
                                 const std::string& value, bool swapped) {
  if (!IsWriteOnceKey(key) || (!swapped && !expected.empty())) return;
  LearnWrites(round, {key}, {value});
}

bool StoreCache::AllCached(int64_t round, const std::vector<std::string>& keys) const {
  absl::MutexLock lock(&mu_);
  if (round != round_) return false;
  for (const auto& k : keys) {
    if (!IsWriteOnceKey(k) || !values_.contains(k)) return false;
  }
  return true;
}

}  // namespace meshrun::agent
