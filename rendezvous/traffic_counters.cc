#include "rendezvous/traffic_counters.h"

#include <arpa/inet.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/net.h"
#include "rendezvous/sparse_maps.h"

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
  }
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
  s.peers_remembered = PeersLocked();
  for (const auto& [node, c] : nodes_) {
    s.store_requests_by_node[node] = c.requests;
    s.store_keys_read_by_node[node] = c.keys_read;
  }
  return s;
}

}  // namespace meshrun::rendezvous
