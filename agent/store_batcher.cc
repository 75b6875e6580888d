#include "agent/store_batcher.h"

#include <algorithm>
#include <utility>

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

StoreBatcher::StoreBatcher(BatchUpstream* upstream, StoreBatcherOptions options)
    : upstream_(upstream), options_(options) {}

void StoreBatcher::Start(Id id, StoreRequest request, Done done) {
  std::vector<BatchItem> now;
  {
    absl::MutexLock lock(&mu_);
    BatchItem item{id, std::move(request), std::move(done)};
    if (awaiting_acceptance_) {
      held_.push_back(std::move(item));
      return;
    }
    awaiting_acceptance_ = true;
    now.push_back(std::move(item));
    stats_.items += 1;
    stats_.batches += 1;
  }
  Send(std::move(now));
}

std::vector<BatchItem> StoreBatcher::TakeLocked() {
  std::vector<BatchItem> batch;
  int64_t bytes = 0;
  while (!held_.empty() && static_cast<int>(batch.size()) < std::max(1, options_.max_items)) {
    const int64_t b = Bytes(held_.front().request);
    if (!batch.empty() && bytes + b > options_.max_bytes) break;
    bytes += b;
    batch.push_back(std::move(held_.front()));
    held_.pop_front();
  }
  if (!batch.empty()) {
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
    next = TakeLocked();
    if (next.empty()) {
      awaiting_acceptance_ = false;
      return;
    }
  }
  Send(std::move(next));
}

void StoreBatcher::Cancel(Id id) {
  Done done;
  {
    absl::MutexLock lock(&mu_);
    auto it = std::find_if(held_.begin(), held_.end(), [id](const BatchItem& i) { return i.id == id; });
    if (it != held_.end()) {
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
