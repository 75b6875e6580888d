#include "rendezvous/traffic_counters.h"

#include "absl/strings/str_cat.h"

namespace meshrun::rendezvous {
namespace {

constexpr const char* kDirect = "(direct)";
constexpr const char* kOther = "(other)";

}  // namespace

TrafficCounters::TrafficCounters(TrafficOptions options) : options_(options) {}

void TrafficCounters::SweepLocked(absl::Time now) {
  if (now < next_sweep_) return;
  next_sweep_ = now + options_.forget_after / 4;
  const absl::Time cutoff = now - options_.forget_after;
  absl::erase_if(peers_, [cutoff](const auto& p) { return p.second < cutoff; });
}

bool TrafficCounters::OnCall(absl::string_view peer, absl::Time now) {
  absl::MutexLock lock(&mu_);
  SweepLocked(now);
  auto it = peers_.find(peer);
  if (it != peers_.end()) {
    it->second = now;
    return false;
  }
  ++accepted_;
  if (static_cast<int64_t>(peers_.size()) < options_.max_peers) peers_.emplace(std::string(peer), now);
  return true;
}

void TrafficCounters::OnStoreRequest(absl::string_view node, int64_t keys_read) {
  std::string name = node.empty() ? kDirect : std::string(node.substr(0, options_.max_node_bytes));
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) {
    if (static_cast<int64_t>(nodes_.size()) >= options_.max_nodes) name = kOther;
    it = nodes_.try_emplace(std::move(name)).first;
  }
  ++it->second.requests;
  it->second.keys_read += keys_read;
}

TrafficSnapshot TrafficCounters::Snapshot() const {
  absl::MutexLock lock(&mu_);
  TrafficSnapshot s;
  s.connections_accepted = accepted_;
  s.peers_remembered = static_cast<int64_t>(peers_.size());
  for (const auto& [node, c] : nodes_) {
    s.store_requests_by_node[node] = c.requests;
    s.store_keys_read_by_node[node] = c.keys_read;
  }
  return s;
}

}  // namespace meshrun::rendezvous
