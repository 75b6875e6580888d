#include "agent/tcpstore/read_cache.h"

#include <functional>
#include <utility>

namespace meshrun::agent::tcpstore {

size_t ReadCache::StripeOf(const std::string& key) { return std::hash<std::string>{}(key) % kStripes; }

ReadCache::Ticket ReadCache::BeforeRead(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  const Stripe& s = stripes_[StripeOf(key)];
  return Ticket{s.generation, s.in_flight == 0};
}

void ReadCache::Fill(const std::string& key, std::string value, Ticket t) {
  const int64_t size = static_cast<int64_t>(key.size() + value.size()) + kEntryOverhead;
  if (!t.clean || size > max_bytes_) return;
  absl::MutexLock lock(&mu_);
  // The same generation with none in flight at the ticket: no write of the
  // stripe was sent since, so none was in flight while the value was read.
  if (stripes_[StripeOf(key)].generation != t.generation) return;
  DropLocked(key);
  if (stats_.bytes + size > max_bytes_) {
    values_.clear();
    stats_.bytes = 0;
    ++stats_.flushes;
  }
  stats_.bytes += size;
  ++stats_.fills;
  values_.emplace(key, std::move(value));
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

void ReadCache::WriteAnswered(const std::vector<std::string>& keys) {
  absl::MutexLock lock(&mu_);
  for (const std::string& key : keys) {
    Stripe& s = stripes_[StripeOf(key)];
    ++s.generation;
    --s.in_flight;
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
