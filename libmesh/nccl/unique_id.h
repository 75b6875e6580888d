// Test hooks of the NCCL backend (libmesh internal): ncclGetUniqueId for the
// CPU-only id-distribution test, and one communicator's creation for the
// GPU tests of its error and timeout paths.
#pragma once
#include <string>
#include "absl/status/statusor.h"
#include "absl/time/time.h"
namespace meshrun::mesh::internal {
// A fresh NCCL unique id (128 bytes); works without a GPU.
absl::StatusOr<std::string> NcclUniqueIdForTest();
// Creates (then destroys) one communicator of `nranks` as `rank` from
// `id` (128 bytes) on the current CUDA device, as a mesh does for one row:
// non-blocking unless `blocking`, bounded by `timeout`. DEADLINE_EXCEEDED
// when the other ranks never come; NCCL's error otherwise.
absl::Status NcclInitOneCommForTest(const std::string& id, int nranks, int rank, absl::Duration timeout,
                                    bool blocking);
}  // namespace meshrun::mesh::internal
