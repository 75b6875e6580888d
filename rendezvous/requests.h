// The request rules of the server's gRPC adapter (rendezvous_service.cc), as
// pure functions: the token and run-id check every request passes, and a
// Join request's validation and translation to the domain types. Kept apart
// from the adapter so tests and the fuzzer (tests/fuzz/) run the same code.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshrun/proto/rendezvous.pb.h"
#include "rendezvous/types.h"

namespace meshrun::rendezvous::requests {

// OK, or UNAUTHENTICATED (a token is required and `run.token` is not it;
// compared in constant time) or INVALID_ARGUMENT (empty run id, when
// `need_run_id`).
absl::Status Admit(const std::string& server_token, const v1::RunRef& run, bool need_run_id = true);

// Bounds of a Join: the world size (nodes x workers per node, summed in int)
// must not overflow, whatever a client claims.
inline constexpr int kMaxNprocPerNode = 1 << 16;
inline constexpr int kMaxNodes = 1 << 14;

struct JoinArgs {
  NodeDesc node;
  RunConfig config;
};

// Validates a Join request (INVALID_ARGUMENT naming what is wrong or the
// limit passed: nproc <= kMaxNprocPerNode, max_nodes <= kMaxNodes) and
// translates it. `peer_ip`: the source address the server saw (wire::PeerIp),
// which becomes the node's address unless it gave an explicit local_addr.
absl::StatusOr<JoinArgs> JoinFromProto(const v1::JoinRequest& req, const std::string& peer_ip);

}  // namespace meshrun::rendezvous::requests
