// The client side of the server's Status RPC: what `meshrun status` shows,
// and the request counters that tests and benchmarks read. Also answered by
// a node's store proxy (its own counters), through a "unix:" endpoint.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/channel.h"
#include "common/security.h"
#include "proto/types.h"

namespace meshrun::client {

// A server's answer to Status (rendezvous.proto's StatusResponse as domain
// types).
struct ServerStatus {
  std::vector<rendezvous::RunStatus> runs;  // Sorted by run id.
  int port = 0;
  std::string version;
  // Requests served, and refused, per method name ("KvGet", "Join", ...)
  // since the server started.
  std::map<std::string, int64_t> request_counts;
  std::map<std::string, int64_t> refused_counts;
  // Connections the server accepted since it started.
  int64_t connections_accepted = 0;
  // Store requests served, and keys they asked to read, per node id
  // ("(direct)" for clients without a store proxy).
  std::map<std::string, int64_t> store_requests_by_node;
  std::map<std::string, int64_t> store_keys_read_by_node;
  // A replicated server (meshrun server --state): this replica's role
  // ("leader" or "standby"; "" for a single server) and every replica, the
  // leader first.
  struct Replica {
    std::string id;
    std::string address;
    bool leader = false;
  };
  std::string replica_role;
  std::vector<Replica> replicas;
  // The answering replica's own address ("" for a single server), and when
  // it began to lead (absl::InfinitePast() when it does not lead).
  std::string replica_self;
  absl::Time leading_since = absl::InfinitePast();
  // torchft's lighthouses, one per run that used one (rendezvous.proto's
  // LighthouseStatus), sorted by run id.
  struct Lighthouse {
    std::string run_id;
    int64_t quorum_id = 0;
    int64_t quorum_members = 0;
    int64_t waiting = 0;
    int64_t replica_groups = 0;
    std::string reason;
    // The last quorum's members (torchft's replica ids, sorted) and the
    // step each had.
    std::vector<std::pair<std::string, int64_t>> member_steps;
  };
  std::vector<Lighthouse> lighthouses;
};

// Asks the server on `server` for its status: every run, or only `run_id`
// when non-empty (then NOT_FOUND naming it when the server has no such run);
// with `events`, each run's timeline too (RunStatus::timeline).
// `token`: the server's (UNAUTHENTICATED when wrong). DEADLINE_EXCEEDED
// naming the endpoint when no answer comes within `timeout`. Blocking;
// thread-safe.
absl::StatusOr<ServerStatus> QueryServerStatus(const Connection& server, const std::string& token,
                                               const std::string& run_id, absl::Duration timeout,
                                               bool events = false);

// The same over a connection of its own: Dial(endpoint, auth.tls) with
// wait_for_server false (a closed port fails at once, "connection
// refused"), all within `timeout`; Dial's errors otherwise.
absl::StatusOr<ServerStatus> QueryServerStatus(const std::string& endpoint, const ClientAuth& auth,
                                               const std::string& run_id = "",
                                               absl::Duration timeout = absl::Seconds(10), bool events = false);

// Only the requests served per method name (tests and benchmarks):
// QueryServerStatus(endpoint, {token, tls})'s request_counts.
absl::StatusOr<std::map<std::string, int64_t>> QueryRequestCounts(const std::string& endpoint,
                                                                  const std::string& token,
                                                                  const TlsMaterial& tls = {});

}  // namespace meshrun::client
