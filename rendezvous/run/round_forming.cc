#include "rendezvous/run/round_forming.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "rendezvous/run/advertised_address.h"
#include "rendezvous/run/node_order.h"

namespace meshrun::rendezvous {

absl::StatusOr<FormedRound> FormRound(std::vector<NodeDesc>& nodes, int64_t round, int restart_count,
                                      int max_restarts, int64_t max_world_size, absl::string_view run_id) {
  if (nodes.empty()) return absl::InvalidArgumentError("a round needs at least one node");
  int64_t world64 = 0;
  for (const auto& d : nodes) world64 += d.nproc;  // Each nproc <= max_nproc: no overflow.
  if (world64 > max_world_size) {
    return absl::InvalidArgumentError(absl::StrCat("round ", round, " of run '", run_id.substr(0, 64),
                                                   "' would have world size ", world64, ": allowed: 1..",
                                                   max_world_size, " (max_world_size)"));
  }
  if (absl::Status s = DecideAddresses(nodes); !s.ok()) return s;
  NodeOrder order = OrderNodes(nodes);
  FormedRound formed;
  formed.warning = std::move(order.warning);
  absl::flat_hash_map<std::string, int> role_size;
  for (const auto& d : nodes) {
    formed.world_size += d.nproc;
    role_size[d.role] += d.nproc;
  }
  const NodeDesc& first = nodes[order.order[0]];
  formed.assignments.reserve(nodes.size());
  int base = 0;
  absl::flat_hash_map<std::string, int> role_base;
  for (int r = 0; r < static_cast<int>(order.order.size()); ++r) {
    const NodeDesc& n = nodes[order.order[r]];
    Assignment a;
    a.round = round;
    a.node_rank = r;
    a.node_count = static_cast<int>(nodes.size());
    a.rank_base = base;
    a.world_size = formed.world_size;
    a.master_addr = first.addr;
    a.node_addr = n.addr;
    a.master_port = first.master_port;
    a.restart_count = restart_count;
    a.max_restarts = max_restarts;
    a.role_rank_base = role_base[n.role];
    a.role_world_size = role_size[n.role];
    role_base[n.role] += n.nproc;
    base += n.nproc;
    formed.assignments.push_back(std::move(a));
  }
  formed.order = std::move(order.order);
  return formed;
}

}  // namespace meshrun::rendezvous
