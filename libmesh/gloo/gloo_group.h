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
// call, every member publishes its description and the pair addresses of
// all its rows and reads its row peers' addresses plus the others'
// descriptions (or, in a mesh of more than everyone_checks_up_to members,
// the first member's verdict: one more request for it) in one
// SetThenMultiGet (agreement.h), connects
// the rows concurrently and passes a barrier per row; `timeout` bounds each
// wait, each pair's connect and each barrier.
// `loop_nice` is the nice value of the device's loop thread (see
// MeshOptions::gloo_loop_nice).
absl::StatusOr<Backend::CreateGroups> MakeGlooGroupCreator(std::shared_ptr<Store> store, const std::string& address,
                                                           absl::Duration timeout, int loop_nice);

}  // namespace meshrun::mesh::internal
