// The Gloo backend of libmesh: one Gloo context per row, created by the
// row's members only, over one tcp device per mesh.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backends.h"
#include "common/store.h"

namespace meshrun::mesh::internal {

// Returns the group creator of a Gloo mesh whose tcp device listens on
// `address` (numeric, the address that reaches the store's server). Per
// call, every member publishes the pair addresses of all its rows in one
// store request, checks the mesh description against the first member's
// (one more), reads its peers' addresses in one request and connects the
// rows concurrently; `timeout` bounds each wait and each pair's connect.
// `loop_nice` is the nice value of the device's loop thread (see
// MeshOptions::gloo_loop_nice).
absl::StatusOr<Backend::CreateGroups> MakeGlooGroupCreator(std::shared_ptr<Store> store, const std::string& address,
                                                           absl::Duration timeout, int loop_nice);

}  // namespace meshrun::mesh::internal
