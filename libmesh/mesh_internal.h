// libmesh internals shared by the mesh and its backends. Not installed.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/store.h"
#include "meshrun/device_mesh.h"

namespace meshrun::mesh::internal {

// What members must agree on before creating communicators.
struct Description {
  std::string device;   // "cpu" | "cuda"
  std::string backend;  // "gloo" | "nccl"
  std::string shape;    // "2,4"
  std::string names;    // "replicate,shard"
  int rank = -1;        // Who wrote it (named in messages; not compared).
  std::string ranks;    // Digest of the rank array ("world" for all ranks in order).
  // Where it runs (not compared): node rank, local rank, and for NCCL the
  // GPU's PCI bus id ("" for Gloo). The first member refuses two members
  // of one node on one GPU.
  int node = -1;
  int local_rank = -1;
  std::string gpu;
  // MeshOptions::everyone_checks_up_to (compared): members that check the
  // agreement in different ways could not reach one verdict.
  int checks = -1;
  std::string Encode() const;
  static Description Decode(const std::string& text);
  // The first field that differs ("shape: (2, 4) vs (4, 2)"), or "".
  std::string Diff(const Description& other) const;
};

// One row of one dimension (or of a flattened dimension) to connect.
struct GroupSpec {
  std::string key;          // Store prefix of this row, "mesh/<id>/<dim>/row<r>".
  std::string name;         // "<id>/<dim>/row<r>"
  std::string dim_name;
  std::vector<int> ranks;   // Global ranks by group rank.
  int group_rank = 0;       // This member's coordinate along the dimension.
};

// The error of a member whose description (`mine`) differs from another
// member's (`theirs`, written by rank theirs.rank) in `diff`, the first
// differing field (Description::Diff): FAILED_PRECONDITION, "mesh mismatch:
// rank 3 and rank 0 disagree on the shape: (4,2) vs (2,4) (rank 3 vs rank 0)".
absl::Status MismatchError(const Description& mine, const Description& theirs, const std::string& diff);

}  // namespace meshrun::mesh::internal
