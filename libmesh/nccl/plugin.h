// libmesh's NCCL backend is a library of its own, libmeshrun_mesh_nccl.so.0,
// installed beside libmesh and loaded (dlopen) the first time a mesh asks for
// "cuda": libmesh itself then needs neither NCCL nor the CUDA runtime, and
// runs where only glibc is (docs/install.md). The plugin exports one C
// function, kNcclPluginEntry, returning this table.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends.h"

namespace meshrun::mesh::internal {

// Bumped whenever the table or the types it passes change: libmesh refuses a
// plugin of another version (a plugin left from another build).
inline constexpr int kNcclPluginVersion = 1;
inline constexpr char kNcclPluginEntry[] = "meshrun_mesh_nccl_plugin";

struct NcclPlugin {
  int version;
  absl::StatusOr<Backend> (*make_backend)(std::shared_ptr<Store> store, const World& world, const MeshOptions& options);
  absl::StatusOr<std::string> (*unique_id_for_test)();
  absl::Status (*init_one_comm_for_test)(const std::string& id, int nranks, int rank, absl::Duration timeout,
                                         bool blocking);
};

}  // namespace meshrun::mesh::internal
