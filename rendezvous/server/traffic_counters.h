// The server's own count of who talks to it: connections accepted, and
// store requests per node. They show that workers reach the store through
// their node's agent, so the server sees O(nodes) connections, not
// O(workers) (docs/design.md section 1 item 6). Pure domain: no gRPC; the gRPC
// side feeds it (call_interceptor.h for connections, the service's
// store handlers for store requests).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshrun::rendezvous {

struct TrafficOptions {
  // Client addresses (connections) remembered at once. When more are open,
  // a new one is still counted but not remembered, so its later calls are
  // counted again: the count can only grow too high, never hide one.
  int64_t max_peers = 65536;
  // (run, node name) pairs counted at once, over all runs held; requests of
  // further nodes are counted under "(other)" (of no run). A removed run's
  // nodes are forgotten (ForgetRun).
  int64_t max_nodes = 16384;
  // A client address silent this long is forgotten (the server closes a
  // connection idle for connection_idle_timeout, limits.h, so by then it is
  // gone): the same address calling again later counts as a new connection.
  absl::Duration forget_after = absl::Minutes(5);
  // Node names longer than this are cut (max_node_id_bytes).
  int64_t max_node_bytes = 256;
};

// A connection's key: family, port and binary address of a gRPC peer string
// of the forms SplitPeer (common/net.h) reads ("ipv4:a.b.c.d:port", "ipv6:[addr]:port",
// the brackets percent-encoded as gRPC 1.51 writes them). nullopt for any
// other form ("unix:..."), an address inet_pton refuses, and a scoped IPv6
// address ("fe80::1%25eth0"), whose zone the key would lose. Pure.
using ConnectionKey = std::array<uint8_t, 19>;
std::optional<ConnectionKey> ConnectionKeyOf(absl::string_view peer);

// The counts at one moment.
struct TrafficSnapshot {
  int64_t connections_accepted = 0;
  int64_t peers_remembered = 0;
  std::map<std::string, int64_t> store_requests_by_node;
  std::map<std::string, int64_t> store_keys_read_by_node;
};

// Thread-safe; every method costs O(1) amortized (a sweep of forgotten
// addresses runs at most once per forget_after / 4).
class TrafficCounters {
 public:
  explicit TrafficCounters(TrafficOptions options = TrafficOptions());

  // A call arrived at `now` on the connection from `peer` (gRPC's peer
  // string, "ipv4:10.0.0.7:53122": the client's address and port, one per
  // TCP connection). The first call of a connection counts it as accepted;
  // returns true then. A connection that never makes a call is not counted.
  // Exact as long as a client port is not reused for a new connection to
  // this server within forget_after of the old one's last call (Linux
  // hands out ephemeral ports in turn, so that takes thousands of
  // connections from one address in that time).
  bool OnCall(absl::string_view peer, absl::Time now);

  // A store request of run `run_id` (admitted: the run exists) received
  // for `node` (the "meshrun-node" metadata; "" when the client sent none:
  // counted as "(direct)"), asking to read `keys_read` keys (0 for writes).
  void OnStoreRequest(absl::string_view run_id, absl::string_view node, int64_t keys_read);

  // Forgets run `run_id`'s per-node counts: the run was removed, and its
  // node ids (fresh for every membership) are not seen again. O(its nodes).
  void ForgetRun(absl::string_view run_id);

  // Server-wide: connections, and every held run's per-node counts (a node
  // name's counts summed over the runs that have it; "(direct)" also keeps
  // the counts of removed runs, so that it never goes down). O(nodes
  // counted).
  TrafficSnapshot Snapshot() const;

  // New connections counted so far while their address could be
  // remembered (at most max_peers at once): unlike connections_accepted,
  // it does not grow with calls of connections it had to forget, so it
  // grows only when the listener accepts (ListenerWatch's sign of a
  // working listener). O(1).
  int64_t connections_remembered() const;

  // Connections (server-wide) and the per-node counts of run `run_id`
  // only: O(that run's nodes), however many the server holds.
  TrafficSnapshot SnapshotOf(absl::string_view run_id) const;

 private:
  void SweepLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  int64_t PeersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TrafficOptions options_;
  mutable absl::Mutex mu_;
  int64_t accepted_ ABSL_GUARDED_BY(mu_) = 0;
  // Client addresses by ConnectionKeyOf, held in the map's own slots. As
  // heap strings, 10,000 agents' addresses outlived their connections by
  // forget_after, scattered among the connections' freed memory, and kept
  // about 8 MiB of it resident after every agent had left. Other forms stay
  // strings (other_peers_).
  absl::flat_hash_map<ConnectionKey, absl::Time> ip_peers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::Time> other_peers_ ABSL_GUARDED_BY(mu_);
  absl::Time next_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  struct NodeCounts {
    int64_t requests = 0;
    int64_t keys_read = 0;
  };
  // Per run id, per node name. Requests past max_nodes go to run "" (no
  // run: never forgotten), node "(other)".
  absl::flat_hash_map<std::string, std::map<std::string, NodeCounts, std::less<>>> runs_ ABSL_GUARDED_BY(mu_);
  int64_t nodes_counted_ ABSL_GUARDED_BY(mu_) = 0;  // Entries of runs_' maps.
  NodeCounts forgotten_direct_ ABSL_GUARDED_BY(mu_);  // "(direct)" of removed runs.
  int64_t accepted_remembered_ ABSL_GUARDED_BY(mu_) = 0;
  // The connection counts of a snapshot.
  TrafficSnapshot ConnectionsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace meshrun::rendezvous
