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

// The agreement check of a mesh (or a flattened row): the first member
// (`first`, a global rank) publishes its description under
// "<key>/desc/r<first>"; every other member reads it (one request each) and
// compares. A member that disagrees fails at once with FAILED_PRECONDITION
// naming both ranks and the field; when the first member never arrives,
// DEADLINE_EXCEEDED names it. Keys are per writer rank, so a member with
// another view of the mesh can never overwrite a peer's.
absl::Status CheckDescriptions(Store& store, const std::string& key, int first, const Description& mine,
                               absl::Duration timeout);

// Names the members of `spec` whose key `key_of(group_rank)` is missing,
// after a timed-out wait: "rank 5 (coordinate 1 along 'shard')".
std::string MissingMembers(Store& store, const GroupSpec& spec,
                           const std::function<std::string(int)>& key_of);

// Creates the communicators of `rows` (one per row this rank belongs to).
using GroupFactory = std::function<absl::StatusOr<std::vector<std::unique_ptr<ProcessGroup>>>(
    const std::vector<GroupSpec>& rows)>;

}  // namespace meshrun::mesh::internal
