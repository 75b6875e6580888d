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

// Every member posts its description for its rows, then reads its peers'
// (one set and one multi-get per row) and checks them. A member that never
// arrives fails with DEADLINE_EXCEEDED naming its rank and the dimension; a
// mismatch fails with FAILED_PRECONDITION naming the rank and the field.
// Rows are handled together: all sets first, then all reads.
absl::Status CheckDescriptions(Store& store, const std::vector<GroupSpec>& rows, const Description& mine,
                               absl::Duration timeout);

// Names the members of `spec` whose key `key_of(group_rank)` is missing,
// after a timed-out wait: "rank 5 (coordinate 1 along 'shard')".
std::string MissingMembers(Store& store, const GroupSpec& spec,
                           const std::function<std::string(int)>& key_of);

// Creates the communicators of `rows` (one per row this rank belongs to).
using GroupFactory = std::function<absl::StatusOr<std::vector<std::unique_ptr<ProcessGroup>>>(
    const std::vector<GroupSpec>& rows)>;

}  // namespace meshrun::mesh::internal
