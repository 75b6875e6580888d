// RunSummary: what an ended run keeps of its nodes once they have left, for
// `meshrun status` (RunStatus) until the registry removes the run
// (ended_run_ttl). Each node's id, host name and address are kept back to
// back in one exactly sized block, with 32-bit offsets: about 90 bytes per
// node instead of the ~600 of a whole member (a 10,000-node run kept ~6 MiB
// for ended_run_ttl). Pure: no lock, no time source; a Run builds one under
// its lock when its last event stream closes (Run::KeepOnlyStatusLocked).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/types.h"

namespace meshrun::rendezvous {

class RunSummary {
 public:
  // Room for `nodes` nodes whose text (ids, host names and addresses
  // together) is `text_bytes` long. False, and nothing kept, when the text
  // passes 4 GiB (the offsets are 32-bit): the run then stays whole.
  bool Reserve(size_t nodes, size_t text_bytes);
  // Adds one node, as it ended: its node rank, whether it was at the exit
  // barrier, its last sign of life (InfinitePast: never seen). Within what
  // Reserve made room for.
  void Add(const NodeDesc& node, int node_rank, bool finished, absl::Time last_seen);
  // Orders the nodes by node rank (Status lists them so). Call once, after
  // the last Add.
  void Seal();

  size_t size() const { return nodes_.size(); }
  // The nodes' NodeStatus, by node rank, appended to `s.node_list`, and
  // their processes added to `s.world_size`: a node that was at the exit
  // barrier is "finished", the others are `run_state` ("finished" or
  // "failed"); keep-alive ages are counted to `now`. O(nodes).
  void AppendTo(RunStatus& s, const std::string& run_state, absl::Time now) const;

 private:
  struct EndedNode {
    uint32_t text_begin = 0;  // node_id, hostname and addr, back to back in text_.
    uint32_t id_size = 0;
    uint32_t hostname_size = 0;
    uint32_t addr_size = 0;
    int node_rank = -1;
    int nproc = 0;
    bool finished = false;
    absl::Time last_seen = absl::InfinitePast();
  };
  std::vector<EndedNode> nodes_;
  std::string text_;
};

}  // namespace meshrun::rendezvous
