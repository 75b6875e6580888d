#include "rendezvous/run/node_order.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace meshrun::rendezvous {

NodeOrder OrderNodes(const std::vector<NodeDesc>& nodes) {
  NodeOrder out;
  const int n = static_cast<int>(nodes.size());
  out.order.resize(n);
  std::iota(out.order.begin(), out.order.end(), 0);

  int given = 0;
  std::vector<int> by_hint(n, -1);
  for (int i = 0; i < n; ++i) {
    int hint = nodes[i].node_rank_hint;
    if (hint < 0) continue;
    ++given;
    if (hint >= n) {
      out.warning = absl::StrCat("node rank ", hint, " asked for by node ", nodes[i].hostname,
                                 " is out of range 0..", n - 1);
    } else if (by_hint[hint] >= 0) {
      const NodeDesc& other = nodes[by_hint[hint]];
      out.warning = absl::StrCat("node rank ", hint, " asked for by two nodes: ", other.hostname,
                                 " (pid ", other.pid, ") and ", nodes[i].hostname, " (pid ",
                                 nodes[i].pid, ")");
    } else {
      by_hint[hint] = i;
    }
  }
  if (given == n && out.warning.empty()) {
    out.order = by_hint;
    return out;
  }
  if (given > 0 && given < n && out.warning.empty()) {
    out.warning = absl::StrCat("a node rank asked for by ", given, " of ", n,
                               " nodes; using the default order");
  }
  std::sort(out.order.begin(), out.order.end(), [&](int a, int b) {
    const NodeDesc& x = nodes[a];
    const NodeDesc& y = nodes[b];
    return std::make_tuple(!x.is_endpoint_host, x.addr, x.hostname, x.pid, x.node_id) <
           std::make_tuple(!y.is_endpoint_host, y.addr, y.hostname, y.pid, y.node_id);
  });
  return out;
}

}  // namespace meshrun::rendezvous
