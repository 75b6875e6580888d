// The Gloo backend of libmesh: one gloo::rendezvous::Context per row,
// created by the row's members only, over a shared tcp device.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/store.h"
#include "mesh_internal.h"

namespace meshrun::mesh::internal {

// Creates a Gloo factory bound to `store` whose tcp device listens on
// `address` (numeric, the address that reaches the store's server).
absl::StatusOr<GroupFactory> MakeGlooFactory(std::shared_ptr<Store> store, const std::string& address,
                                             absl::Duration timeout);

}  // namespace meshrun::mesh::internal
