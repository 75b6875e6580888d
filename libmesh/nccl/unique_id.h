// ncclGetUniqueId for the CPU-only id-distribution test (libmesh internal).
#pragma once
#include <string>
#include "absl/status/statusor.h"
namespace meshrun::mesh::internal {
// A fresh NCCL unique id (128 bytes); works without a GPU.
absl::StatusOr<std::string> NcclUniqueIdForTest();
}  // namespace meshrun::mesh::internal
