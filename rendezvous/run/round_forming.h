// Forming a round: from the nodes that joined it, each node's node rank,
// global ranks and assignment, as torchrun's c10d rendezvous hands them out
// (RANK = rank_base + local rank, GROUP_RANK = node rank, the first node by
// node rank hosts MASTER_ADDR/MASTER_PORT; ROLE_RANK and ROLE_WORLD_SIZE
// count within a node's --role). Pure: no lock, no time source, no
// credentials (the Run's membership renews those: membership.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/types.h"

namespace meshrun::rendezvous {

struct FormedRound {
  // By node rank: the index (into FormRound's `nodes`) of the node with that
  // node rank, and its assignment (no session).
  std::vector<int> order;
  std::vector<Assignment> assignments;
  int world_size = 0;
  // Non-empty when --node_rank values were given but not used (node_order.h).
  std::string warning;
};

// Forms round `round` of run `run_id` from `nodes` (in join order; at
// least one). Each node's advertised address is decided first and written
// back into `nodes` (advertised_address.h). The node order is node_order.h's
// (the --node_rank hints when they are exactly 0..n-1, else join order).
// `restart_count` and `max_restarts` go into every assignment
// (TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS). Errors, and
// nothing formed: INVALID_ARGUMENT when the world size (the sum of the
// nodes' nproc, each within max_nproc) passes `max_world_size`; an
// address that cannot be used (DecideAddresses's error). O(nodes).
absl::StatusOr<FormedRound> FormRound(std::vector<NodeDesc>& nodes, int64_t round, int restart_count,
                                      int max_restarts, int64_t max_world_size, absl::string_view run_id);

}  // namespace meshrun::rendezvous
