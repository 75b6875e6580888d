#include "agent/store_proxy/store_batcher.h"

#include <algorithm>
#include <utility>

#include "common/store.h"

namespace meshrun::agent {
namespace {

int64_t Bytes(const StoreRequest& r) {
  int64_t n = 0;
  for (const std::string& k : r.keys) n += static_cast<int64_t>(k.size());
  for (const std::string& k : r.set_keys) n += static_cast<int64_t>(k.size());
  for (const std::string& v : r.set_values) n += static_cast<int64_t>(v.size());
  return n;
}

}  // namespace

bool IsPublication(const StoreRequest& r) {
  return !r.set_keys.empty() &&
         std::all_of(r.set_keys.begin(), r.set_keys.end(), [](const std::string& k) { return IsWriteOnceKey(k); });
}

StoreBatcher::StoreBatcher(BatchUpstream* upstream, StoreBatcherOptions options)
    : upstream_(upstream),
      options_(options),
      holds_publications_(options.expected_publishers > 1 && options.publication_hold > absl::ZeroDuration()) {
  if (holds_publications_) timer_ = std::thread([this] { HoldTimer(); });
}

StoreBatcher::~StoreBatcher() {
  std::deque<BatchItem> left;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    holding_ = false;
    left.swap(held_);
  }
  if (timer_.joinable()) timer_.join();
  for (BatchItem& item : left) item.done(absl::CancelledError("store proxy stopped"));
}

void StoreBatcher::Start(Id id, StoreRequest request, Done done) {
  std::vector<BatchItem> now;
  {
    absl::MutexLock lock(&mu_);
    const bool publication = holds_publications_ && IsPublication(request);
    held_.push_back(BatchItem{id, std::move(request), std::move(done)});
    if (publication) {
      if (publications_held_++ == 0 && !stopping_) {
        holding_ = true;
        hold_until_ = absl::Now() + options_.publication_hold;
      }
      // Every local worker has published: nobody else to wait for.
      if (publications_held_ >= options_.expected_publishers) holding_ = false;
    }
    now = NextLocked();
  }
  if (!now.empty()) Send(std::move(now));
}

std::vector<BatchItem> StoreBatcher::NextLocked() {
  std::vector<BatchItem> batch;
  if (awaiting_acceptance_ || holding_) return batch;
  int64_t bytes = 0;
  while (!held_.empty() && static_cast<int>(batch.size()) < std::max(1, options_.max_items)) {
    const int64_t b = Bytes(held_.front().request);
    if (!batch.empty() && bytes + b > options_.max_bytes) break;
    bytes += b;
    if (holds_publications_ && IsPublication(held_.front().request)) --publications_held_;
    batch.push_back(std::move(held_.front()));
    held_.pop_front();
  }
  if (!batch.empty()) {
    awaiting_acceptance_ = true;
    stats_.items += static_cast<int64_t>(batch.size());
    stats_.batches += 1;
  }
  return batch;
}

void StoreBatcher::Send(std::vector<BatchItem> items) {
  upstream_->StartBatch(std::move(items), [this] { OnAccepted(); });
}

void StoreBatcher::OnAccepted() {
  std::vector<BatchItem> next;
  {
    absl::MutexLock lock(&mu_);
    awaiting_acceptance_ = false;
    next = NextLocked();
  }
  if (!next.empty()) Send(std::move(next));
}

void StoreBatcher::HoldTimer() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    if (!holding_) {
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return holding_ || stopping_; };
      mu_.Await(absl::Condition(&wake));
      continue;
    }
    auto changed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !holding_ || stopping_; };
    if (mu_.AwaitWithDeadline(absl::Condition(&changed), hold_until_)) continue;
    // Ran out: what is held goes now.
    holding_ = false;
    stats_.holds_ended_by_time += 1;
    std::vector<BatchItem> next = NextLocked();
    if (next.empty()) continue;
    mu_.Unlock();
    Send(std::move(next));
    mu_.Lock();
  }
}

void StoreBatcher::Cancel(Id id) {
  Done done;
  {
    absl::MutexLock lock(&mu_);
    auto it = std::find_if(held_.begin(), held_.end(), [id](const BatchItem& i) { return i.id == id; });
    if (it != held_.end()) {
      if (holds_publications_ && IsPublication(it->request)) --publications_held_;
      done = std::move(it->done);
      held_.erase(it);
    }
  }
  if (done) {
    done(absl::CancelledError("store request cancelled before it was sent"));
    return;
  }
  upstream_->Cancel(id);
}

StoreBatcherStats StoreBatcher::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace meshrun::agent
