#include "rendezvous/run/run_summary.h"

#include <algorithm>

namespace meshrun::rendezvous {

bool RunSummary::Reserve(size_t nodes, size_t text_bytes) {
  if (text_bytes > UINT32_MAX) return false;
  text_.reserve(text_bytes);
  nodes_.reserve(nodes);
  return true;
}

void RunSummary::Add(const NodeDesc& node, int node_rank, bool finished, absl::Time last_seen) {
  EndedNode e;
  e.text_begin = static_cast<uint32_t>(text_.size());
  e.id_size = static_cast<uint32_t>(node.node_id.size());
  e.hostname_size = static_cast<uint32_t>(node.hostname.size());
  e.addr_size = static_cast<uint32_t>(node.addr.size());
  text_.append(node.node_id).append(node.hostname).append(node.addr);
  e.node_rank = node_rank;
  e.nproc = node.nproc;
  e.finished = finished;
  e.last_seen = last_seen;
  nodes_.push_back(e);
}

void RunSummary::Seal() {
  std::sort(nodes_.begin(), nodes_.end(),
            [](const EndedNode& a, const EndedNode& b) { return a.node_rank < b.node_rank; });
}

void RunSummary::AppendTo(RunStatus& s, const std::string& run_state, absl::Time now) const {
  s.node_list.reserve(s.node_list.size() + nodes_.size());
  for (const EndedNode& e : nodes_) {
    auto text = [&](uint32_t begin, uint32_t size) { return text_.substr(begin, size); };
    s.world_size += e.nproc;
    const absl::Duration age = e.last_seen == absl::InfinitePast() ? absl::Seconds(-1) : now - e.last_seen;
    s.node_list.push_back(NodeStatus{text(e.text_begin, e.id_size), text(e.text_begin + e.id_size, e.hostname_size),
                                     text(e.text_begin + e.id_size + e.hostname_size, e.addr_size), e.node_rank,
                                     e.nproc, e.finished ? "finished" : run_state, age});
  }
}

}  // namespace meshrun::rendezvous
