// Reading who leads an election from etcd (leader_read.h).
#include "rendezvous/state/etcd/leader_read.h"

namespace meshrun::rendezvous::state::etcd {

std::optional<LeaderInfo> ToLeader(const KeyValue& kv) {
  LeaderInfo l;
  if (!DecodeCandidate(kv.value, &l.candidate_id, &l.value).ok()) l.value = kv.value;
  l.key = kv.key;
  l.create_revision = kv.create_revision;
  l.lease = kv.lease;
  return l;
}

RangeOptions FirstCreated(const std::string& prefix) {
  RangeOptions o;
  o.range_end = PrefixEnd(prefix);
  o.sort = RangeOptions::Sort::kAscend;
  o.sort_target = RangeOptions::SortTarget::kCreate;
  o.limit = 1;
  return o;
}

absl::StatusOr<std::optional<LeaderInfo>> ReadLeader(Client* client, const std::string& prefix) {
  absl::StatusOr<RangeResult> r = client->Get(prefix, FirstCreated(prefix));
  if (!r.ok()) return r.status();
  if (r->kvs.empty()) return std::optional<LeaderInfo>();
  return ToLeader(r->kvs.front());
}

bool SameLeader(const std::optional<LeaderInfo>& a, const std::optional<LeaderInfo>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a.has_value() || (a->key == b->key && a->create_revision == b->create_revision);
}

}  // namespace meshrun::rendezvous::state::etcd
