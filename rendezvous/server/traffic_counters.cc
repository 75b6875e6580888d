#include "rendezvous/server/traffic_counters.h"

#include <arpa/inet.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/net.h"
#include "rendezvous/run/sparse_maps.h"

namespace meshrun::rendezvous {
namespace {

constexpr const char* kDirect = "(direct)";
constexpr const char* kOther = "(other)";

}  // namespace

TrafficCounters::TrafficCounters(TrafficOptions options) : options_(options) {}

std::optional<ConnectionKey> ConnectionKeyOf(absl::string_view peer) {
  const std::optional<PeerParts> parts = SplitPeer(peer);
  if (!parts || parts->address.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  if (parts->address.find('%') != absl::string_view::npos) return std::nullopt;  // A zone ("%25eth0").
  ConnectionKey key{};
  key[0] = static_cast<uint8_t>(parts->family);
  key[1] = static_cast<uint8_t>(parts->port >> 8);
  key[2] = static_cast<uint8_t>(parts->port & 0xff);
  char text[INET6_ADDRSTRLEN] = {};
  std::memcpy(text, parts->address.data(), parts->address.size());
  if (inet_pton(parts->family, text, key.data() + 3) != 1) return std::nullopt;
  return key;
}

int64_t TrafficCounters::PeersLocked() const {
  return static_cast<int64_t>(ip_peers_.size() + other_peers_.size());
}

void TrafficCounters::SweepLocked(absl::Time now) {
  if (now < next_sweep_) return;
  next_sweep_ = now + options_.forget_after / 4;
  const absl::Time cutoff = now - options_.forget_after;
  auto silent = [cutoff](const auto& p) { return p.second < cutoff; };
  absl::erase_if(ip_peers_, silent);
  absl::erase_if(other_peers_, silent);
  ShrinkIfSparse(ip_peers_);
  ShrinkIfSparse(other_peers_);
}

bool TrafficCounters::OnCall(absl::string_view peer, absl::Time now) {
  const std::optional<ConnectionKey> key = ConnectionKeyOf(peer);
  absl::MutexLock lock(&mu_);
  SweepLocked(now);
  auto seen = [now](auto& map, const auto& k) {
    auto it = map.find(k);
    if (it == map.end()) return false;
    it->second = now;
    return true;
  };
  if (key ? seen(ip_peers_, *key) : seen(other_peers_, peer)) return false;
  ++accepted_;
  if (PeersLocked() < options_.max_peers) {
    if (key) {
      ip_peers_.emplace(*key, now);
    } else {
      other_peers_.emplace(std::string(peer), now);
    }
    ++accepted_remembered_;
  }
  return true;
}

void TrafficCounters::OnStoreRequest(absl::string_view run_id, absl::string_view node, int64_t keys_read) {
  absl::string_view name = node.empty() ? absl::string_view(kDirect) : node.substr(0, options_.max_node_bytes);
  absl::MutexLock lock(&mu_);
  auto run = runs_.find(run_id);
  NodeCounts* counts = nullptr;
  if (run != runs_.end()) {
    if (auto it = run->second.find(name); it != run->second.end()) counts = &it->second;
  }
  if (counts == nullptr) {
    if (nodes_counted_ >= options_.max_nodes) {
      run = runs_.try_emplace("").first;  // Past the limit: one shared entry.
      name = kOther;
    } else if (run == runs_.end()) {
      run = runs_.try_emplace(std::string(run_id)).first;
    }
    auto [it, added] = run->second.try_emplace(std::string(name));
    if (added && !run->first.empty()) ++nodes_counted_;  // The shared "(other)" is not counted.
    counts = &it->second;
  }
  ++counts->requests;
  counts->keys_read += keys_read;
}

void TrafficCounters::ForgetRun(absl::string_view run_id) {
  if (run_id.empty()) return;  // "" holds the counts past the limit.
  absl::MutexLock lock(&mu_);
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return;
  nodes_counted_ -= static_cast<int64_t>(it->second.size());
  // "(direct)" is a name every run may have: its server-wide count must
  // not go down (it is a Prometheus counter). Node ids are the run's own.
  if (auto d = it->second.find(kDirect); d != it->second.end()) {
    forgotten_direct_.requests += d->second.requests;
    forgotten_direct_.keys_read += d->second.keys_read;
  }
  runs_.erase(it);
  ShrinkIfSparse(runs_);
}

TrafficSnapshot TrafficCounters::ConnectionsLocked() const {
  TrafficSnapshot s;
  s.connections_accepted = accepted_;
  s.peers_remembered = PeersLocked();
  return s;
}

int64_t TrafficCounters::connections_remembered() const {
  absl::MutexLock lock(&mu_);
  return accepted_remembered_;
}

TrafficSnapshot TrafficCounters::Snapshot() const {
  absl::MutexLock lock(&mu_);
  TrafficSnapshot s = ConnectionsLocked();
  if (forgotten_direct_.requests > 0) {
    s.store_requests_by_node[kDirect] = forgotten_direct_.requests;
    s.store_keys_read_by_node[kDirect] = forgotten_direct_.keys_read;
  }
  for (const auto& [run, nodes] : runs_) {
    for (const auto& [node, c] : nodes) {
      s.store_requests_by_node[node] += c.requests;
      s.store_keys_read_by_node[node] += c.keys_read;
    }
  }
  return s;
}

TrafficSnapshot TrafficCounters::SnapshotOf(absl::string_view run_id) const {
  absl::MutexLock lock(&mu_);
  TrafficSnapshot s = ConnectionsLocked();
  if (auto it = runs_.find(run_id); it != runs_.end()) {
    for (const auto& [node, c] : it->second) {
      s.store_requests_by_node[node] = c.requests;
      s.store_keys_read_by_node[node] = c.keys_read;
    }
  }
  return s;
}

}  // namespace meshrun::rendezvous
