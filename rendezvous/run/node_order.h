// Deterministic node order of a closing round (docs/design.md §4).
#pragma once

#include <string>
#include <vector>

#include "proto/types.h"

namespace meshrun::rendezvous {

struct NodeOrder {
  // order[i] is the index (into the input) of the node with node rank i.
  std::vector<int> order;
  // Non-empty when --node_rank values were given but not used (e.g. not
  // exactly 0..n-1, or duplicated): says why, naming the nodes.
  std::string warning;
};

// --node_rank is honoured when every node gave one and together they are
// exactly 0..n-1; otherwise the endpoint's host comes first, then nodes sort
// by (addr, hostname, pid, node_id). Pure function.
NodeOrder OrderNodes(const std::vector<NodeDesc>& nodes);

}  // namespace meshrun::rendezvous
