// Keeps etcd's own leader off the leading replica's host.
//
// Why. When a host dies, every election it took part in starts again. If
// the leading replica and etcd's own (raft) leader die together, etcd first
// elects a new leader (an election timeout or two), and its new leader then
// extends every lease by its TTL plus an election timeout (etcd's lessor
// Promote): the dead replica's lease, and so the failover, lasts about
// 1.5 s longer than its TTL (3.2-3.6 s with 2 s leases, against 2.2 s when
// etcd's leader lived: docs/etcd.md). Apart, one host's loss costs one of
// the two elections, never both. So the leading replica, when etcd's leader
// is the member on its own host, asks etcd to hand its leadership to another
// member (Maintenance.MoveLeader, as `etcdctl move-leader` does): a leader
// transfer takes etcd about one heartbeat, and extends the leases once more
// (the leader's own, harmlessly).
//
// Which member is "on this host": the first --state member whose host is
// this machine's (common/net.h IsLocalHost: a loopback literal or name, the
// host name, an address of one of its interfaces), or the one the operator
// names (meshrun server --state_local_member). With none, nothing is moved
// (an etcd elsewhere, e.g. its own StatefulSet on Kubernetes).
//
// Not thread-safe: the replica's thread calls Check while it leads.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/endpoint.h"
#include "rendezvous/state/etcd/client/etcd_client.h"

namespace meshrun::rendezvous::state::etcd {

// The member of `members` on this host, for --state_local_member=`flag`:
// "auto" (the default): the first member whose host IsLocalHost, nullopt
// when none is; "none": nullopt; else "host:port", which must be one of
// `members` (INVALID_ARGUMENT, one line naming the value and the members).
absl::StatusOr<std::optional<Endpoint>> LocalMember(const std::string& flag, const std::vector<Endpoint>& members);

class LeaderApart {
 public:
  // `client` must outlive this. `local`: this host's member (nullopt:
  // Check does nothing). Checks at most once per `interval` (at least
  // 100 ms); after a failure, at most once per twice as long as the time
  // before, up to a minute, until one works.
  LeaderApart(Client* client, std::optional<Endpoint> local, absl::Duration interval);

  enum class Outcome { kIdle, kApart, kAlone, kMoved, kFailed };
  // At most once per interval (else kIdle, nothing asked): asks the local
  // member whether it is etcd's leader (Maintenance.Status); kApart when it
  // is not; kAlone when it is and no other voting member exists (a
  // one-member etcd: nothing to do); when it is, hands etcd's leadership to
  // the first other voting member that answers its Status with no error and
  // sees the same leader (or, when no other member is one of this client's,
  // to the first one none of whose addresses failed): kMoved, logged once
  // per move. kFailed when etcd refused or did not
  // answer (logged, at most once a minute; tried again next interval); a
  // refusal for want of etcd's root role (PERMISSION_DENIED) is logged once
  // and never tried again. `force` checks now, whatever the interval.
  Outcome Check(bool force = false);

 private:
  Outcome CheckNow();
  Outcome Move(uint64_t transferee, const std::string& name);
  Outcome Failed(const absl::Status& s);

  Client* const client_;
  const std::optional<Endpoint> local_;
  const absl::Duration interval_;
  absl::Time last_check_ = absl::InfinitePast();
  int failures_ = 0;  // Checks that failed in a row (their back-off).
  absl::Time last_failure_log_ = absl::InfinitePast();
  bool refused_ = false;  // etcd's auth refused MoveLeader: never asked again.
};

}  // namespace meshrun::rendezvous::state::etcd
