// The request rules of the server's gRPC adapter (rendezvous_service.cc,
// store_service.cc), as pure functions: the token and run-id check every
// request passes, a Join request's validation and translation to the domain
// types, and the checks of the requests that carry bounds of their own
// (Watch, ReportFinished, KvBatch). Kept apart from the adapter so tests and
// the fuzzer (tests/fuzz/) run the same code: every check the adapter makes
// before a request reaches the domain is one of these.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshrun/proto/rendezvous.pb.h"
#include "proto/types.h"
#include "rendezvous/lighthouse/quorum.h"
#include "rendezvous/policy/limits.h"

namespace meshrun::rendezvous::requests {

// OK, or UNAUTHENTICATED (a token is required and `run.token` is not it;
// compared in constant time whatever the lengths) or INVALID_ARGUMENT (an
// empty run id, or one longer than limits.max_run_id_bytes, when
// `need_run_id`).
absl::Status Admit(const std::string& server_token, const v1::RunRef& run, bool need_run_id = true,
                   const ServerLimits& limits = ServerLimits());

struct JoinArgs {
  NodeDesc node;
  RunConfig config;
};

// Translates a Join request and validates it against `limits` (CheckJoin in
// limits.h: INVALID_ARGUMENT naming the field, the value and what is
// allowed; e.g. nproc <= max_nproc, so the world size cannot overflow).
// `peer_ip`: the source address the server saw (wire::PeerIp), which becomes
// the node's address unless it gave an explicit local_addr. A keep-alive
// interval or attempt count of 0 means the server's default.
absl::StatusOr<JoinArgs> JoinFromProto(const v1::JoinRequest& req, const std::string& peer_ip,
                                       const ServerLimits& limits = ServerLimits());

// A Watch request, after Admit: INVALID_ARGUMENT for a node id longer than
// limits.max_node_id_bytes.
absl::Status CheckWatch(const v1::WatchRequest& req, const ServerLimits& limits = ServerLimits());

// A ReportFinished request, after Admit: its exit-barrier wait (timeout_ms),
// or INVALID_ARGUMENT when that is negative or above limits.max_wait.
absl::StatusOr<absl::Duration> BarrierTimeout(const v1::ReportFinishedRequest& req,
                                              const ServerLimits& limits = ServerLimits());

// A PlaceReplicaGroup request, after Admit: OK, or INVALID_ARGUMENT naming
// the field, the value and what is allowed: replica_groups 1..
// limits.max_replica_groups, 1 <= min_nodes_per_group <= max_nodes_per_group
// <= limits.max_nodes, a node id of 1..max_node_id_bytes, and group run ids
// ("<run id>-group-<R-1>") within max_run_id_bytes.
absl::Status CheckPlaceReplicaGroup(const v1::PlaceReplicaGroupRequest& req,
                                    const ServerLimits& limits = ServerLimits());

// A ReplicaGroupStates request, after Admit: OK, or INVALID_ARGUMENT for
// replica_groups outside 1..limits.max_replica_groups or group run ids
// past max_run_id_bytes.
absl::Status CheckReplicaGroupStates(const v1::ReplicaGroupStatesRequest& req,
                                     const ServerLimits& limits = ServerLimits());

// A KvBatch request, after Admit: INVALID_ARGUMENT for more than
// limits.max_batch_items items.
absl::Status CheckKvBatch(const v1::KvBatchRequest& req, const ServerLimits& limits = ServerLimits());

// A Lighthouse call's settings, after Admit: 0 means torchft's default
// (min_replicas 1, join_timeout 60 s, quorum_tick 100 ms, heartbeat_timeout
// 5 s); INVALID_ARGUMENT naming the field and what is allowed for a
// negative value, min_replicas above limits.max_replica_groups, a
// quorum_tick under 10 ms or above 60 s, a timeout above limits.max_wait; and for an empty
// replica id or one longer than limits.max_node_id_bytes, and for a
// requester (`member_bytes`, its encoded size; 0 for a heartbeat) longer than
// limits.max_quorum_member_bytes.
absl::StatusOr<lighthouse::LighthouseSettings> LighthouseSettingsFromProto(const v1::LighthouseSettings& s,
                                                                           const std::string& replica_id,
                                                                           int64_t member_bytes,
                                                                           const ServerLimits& limits = ServerLimits());

}  // namespace meshrun::rendezvous::requests
