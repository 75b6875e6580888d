// Who leads an election on etcd, read from its prefix: the candidate key
// created first (etcd's election recipe). Shared by Election (election.cc)
// and LeaderObserver (leader_observer.cc); not part of the interface.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "rendezvous/state/etcd/client/etcd_client.h"
#include "rendezvous/state/etcd/election.h"

namespace meshrun::rendezvous::state::etcd {

// A candidate's key as a LeaderInfo (its value decoded; kept whole when it
// does not decode). Pure.
std::optional<LeaderInfo> ToLeader(const KeyValue& kv);

// The range read that finds the key created first under `prefix`. Pure.
RangeOptions FirstCreated(const std::string& prefix);

// Reads the leader under `prefix` now (nullopt: nobody campaigns). One etcd
// read, bounded by the client's call_timeout; the client's error otherwise.
absl::StatusOr<std::optional<LeaderInfo>> ReadLeader(Client* client, const std::string& prefix);

// The same leadership: the same key, created at the same revision. Pure.
bool SameLeader(const std::optional<LeaderInfo>& a, const std::optional<LeaderInfo>& b);

// Election::Observe's work: watches `prefix` and reports the leader to
// `on_change` whenever it changed (and once at the start). `client` must
// outlive the observer.
std::unique_ptr<LeaderObserver> StartLeaderObserver(Client* client, const std::string& prefix,
                                                    std::function<void(const std::optional<LeaderInfo>&)> on_change);

}  // namespace meshrun::rendezvous::state::etcd
