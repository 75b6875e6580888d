// The state a mesh and the sub-meshes sliced from it share (DeviceMesh's
// state_), for libmesh's own files: device_mesh.cc (the handle: accessors,
// slicing, groups) and mesh_create.cc (creation and flattening). Not installed.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backends.h"
#include "common/store.h"
#include "meshrun/device_mesh.h"
#include "recording_store.h"

namespace meshrun::mesh {

struct FlatEntry {
  int first = 0;
  int last = 0;
  std::unique_ptr<ProcessGroup> group;
};

struct MeshState {
  DeviceType device = DeviceType::kCpu;
  World world;
  MeshOptions options;
  MeshLayout root;
  std::string mesh_id;
  std::optional<std::vector<int>> coordinate;
  std::shared_ptr<Store> store;
  // With options.releasable_keys: `store`, remembering what it wrote.
  std::shared_ptr<internal::RecordingStore> recorded;
  internal::Backend backend;
  std::vector<std::unique_ptr<ProcessGroup>> groups;  // One per root dimension.
  absl::Mutex mu;
  // Flattened dimensions, in creation order (indices never move), by name.
  std::vector<FlatEntry> flattened ABSL_GUARDED_BY(mu);
  std::map<std::string, int> flat_index ABSL_GUARDED_BY(mu);

  ~MeshState() {
    backend.StopWatchdog();
    absl::MutexLock lock(&mu);
    flattened.clear();
    groups.clear();
  }

  std::vector<ProcessGroup*> AllGroups() {
    std::vector<ProcessGroup*> out;
    for (auto& g : groups) out.push_back(g.get());
    absl::MutexLock lock(&mu);
    for (auto& f : flattened) out.push_back(f.group.get());
    return out;
  }
};

// Encodes which dimensions a DeviceMesh handle covers (DeviceMesh::dims_):
// root dimension d is d; a flattened dimension is kFlatBase + its index in
// MeshState::flattened.
constexpr int kFlatBase = 1 << 20;

// The error of a mesh call on a rank outside the mesh: FAILED_PRECONDITION.
inline absl::Status NotMemberError(int rank) {
  return absl::FailedPreconditionError(absl::StrCat("rank ", rank, " is not a member of this mesh"));
}

}  // namespace meshrun::mesh
