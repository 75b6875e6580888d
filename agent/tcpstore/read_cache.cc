#include "agent/tcpstore/read_cache.h"

#include <functional>
#include <utility>

#include "absl/cleanup/cleanup.h"

namespace meshrun::agent::tcpstore {

size_t ReadCache::StripeOf(const std::string& key) { return std::hash<std::string>{}(key) % kStripes; }

ReadCache::Ticket ReadCache::BeforeRead(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  const Stripe& s = stripes_[StripeOf(key)];
  return Ticket{s.generation, s.in_flight == 0};
}

bool ReadCache::Fill(const std::string& key, std::string value, Ticket t) {
  const int64_t size = static_cast<int64_t>(key.size() + value.size()) + kEntryOverhead;
  if (!t.clean || size > max_bytes_) return false;
  absl::MutexLock lock(&mu_);
  // The same generation with none in flight at the ticket: no write of the
  // stripe was sent since, so none was in flight while the value was read.
  if (stripes_[StripeOf(key)].generation != t.generation) return false;
  DropLocked(key);
  if (stats_.bytes + size > max_bytes_) {
    values_.clear();
    stats_.bytes = 0;
    ++stats_.flushes;
  }
  stats_.bytes += size;
  ++stats_.fills;
  values_.emplace(key, std::move(value));
  return true;
}

ReadCache::Value ReadCache::Read(const std::string& key, const std::function<Value()>& read) {
  std::shared_ptr<absl::Notification> shared, own;
  Ticket ticket;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = values_.find(key); it != values_.end()) return std::optional<std::string>(it->second);
    if (auto it = in_flight_reads_.find(key); it != in_flight_reads_.end()) {
      shared = it->second;
      ++stats_.shared_reads;
    }
  }
  if (shared != nullptr) {
    shared->WaitForNotificationWithTimeout(kMaxSharedWait);
    absl::MutexLock lock(&mu_);
    if (auto it = values_.find(key); it != values_.end()) return std::optional<std::string>(it->second);
  }
  {
    absl::MutexLock lock(&mu_);
    const Stripe& s = stripes_[StripeOf(key)];
    ticket = Ticket{s.generation, s.in_flight == 0};
    // Only a read whose value may be kept is one the others wait for.
    if (ticket.clean && max_bytes_ > 0 && !in_flight_reads_.contains(key)) {
      own = std::make_shared<absl::Notification>();
      in_flight_reads_.emplace(key, own);
    }
  }
  // Whatever `read` does, the reads waiting for this one are let go.
  absl::Cleanup release = [&] {
    if (own == nullptr) return;
    {
      absl::MutexLock lock(&mu_);
      in_flight_reads_.erase(key);
    }
    own->Notify();
  };
  Value v = read();
  if (v.ok() && v->has_value()) Fill(key, **v, ticket);
  return v;
}

std::optional<std::string> ReadCache::Get(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::vector<std::string>> ReadCache::GetAll(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  absl::MutexLock lock(&mu_);
  for (const std::string& key : keys) {
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    out.push_back(it->second);
  }
  return out;
}

void ReadCache::DropLocked(const std::string& key) {
  auto it = values_.find(key);
  if (it == values_.end()) return;
  stats_.bytes -= static_cast<int64_t>(it->first.size() + it->second.size()) + kEntryOverhead;
  values_.erase(it);
}

void ReadCache::WriteSent(const std::vector<std::string>& keys) {
  absl::MutexLock lock(&mu_);
  for (const std::string& key : keys) {
    Stripe& s = stripes_[StripeOf(key)];
    ++s.generation;
    ++s.in_flight;
    DropLocked(key);
  }
}

void ReadCache::WriteAnswered(const std::vector<std::string>& keys, bool ok) {
  absl::MutexLock lock(&mu_);
  for (const std::string& key : keys) {
    Stripe& s = stripes_[StripeOf(key)];
    ++s.generation;
    if (ok) --s.in_flight;  // Else held in flight for good: its outcome is unknown.
    DropLocked(key);
  }
}

uint64_t ReadCache::Generation(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  return stripes_[StripeOf(key)].generation;
}

ReadCache::Stats ReadCache::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s = stats_;
  s.keys = static_cast<int64_t>(values_.size());
  return s;
}

}  // namespace meshrun::agent::tcpstore
