// The NCCL plugin's one export (nccl/plugin.h): its table of entry points.
#include "nccl/plugin.h"
#include "nccl/unique_id.h"

extern "C" __attribute__((visibility("default"))) const meshrun::mesh::internal::NcclPlugin* meshrun_mesh_nccl_plugin() {
  using namespace meshrun::mesh::internal;
  static const NcclPlugin plugin{kNcclPluginVersion, &MakeNcclBackend, &NcclUniqueIdForTest, &NcclInitOneCommForTest};
  return &plugin;
}
