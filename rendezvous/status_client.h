// The client side of the server's Status RPC, for `meshrun status`: the
// server's runs and their nodes as domain types (types.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/types.h"

namespace meshrun::rendezvous {

struct ServerStatus {
  std::vector<RunStatus> runs;  // Sorted by run id.
  int port = 0;
  std::string version;
};

// Asks the server at `endpoint` ("host:port") for its status: every run, or
// only `run_id` when non-empty (then NOT_FOUND naming it when the server has
// no such run). `token` is MESHRUN_TOKEN (UNAUTHENTICATED when wrong).
// UNAVAILABLE naming the endpoint when nothing answers within `timeout`.
// Blocking; thread-safe.
absl::StatusOr<ServerStatus> QueryServerStatus(const std::string& endpoint, const std::string& token,
                                               const std::string& run_id, absl::Duration timeout);

}  // namespace meshrun::rendezvous
