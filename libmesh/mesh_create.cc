// Creating a mesh (init_device_mesh and its forms) and flattening one
// (DeviceMesh::Flatten): the members agree in the store, then the backend
// connects one process group per row. The handle's accessors and slicing
// live in device_mesh.cc.
#include <algorithm>
#include <atomic>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/grpc_store.h"
#include "common/env_registry.h"
#include "mesh_internal.h"
#include "mesh_state.h"

namespace meshrun::mesh {

using internal::Description;
using internal::GroupSpec;

absl::StatusOr<DeviceType> ParseDeviceType(absl::string_view text) {
  if (text == "cpu") return DeviceType::kCpu;
  if (text == "cuda") return DeviceType::kCuda;
  if (absl::StartsWith(text, "cuda:") || absl::StartsWith(text, "cpu:")) {
    return absl::InvalidArgumentError(absl::StrCat("Device type with index is not supported but got ", text,
                                                   "; use \"cuda\" (the device comes from LOCAL_RANK)"));
  }
  return absl::InvalidArgumentError(absl::StrCat("device type '", text, "': allowed: cpu (Gloo), cuda (NCCL)"));
}

absl::StatusOr<World> WorldFromEnv() {
  World w;
  auto need_int = [](const env::Var& var, auto* out) -> absl::Status {
    absl::StatusOr<std::optional<long long>> v = env::GetInt(var);
    if (!v.ok()) return v.status();
    if (!v->has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(var.name, " is not set: start this program with meshrun"));
    }
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(**v);
    return absl::OkStatus();
  };
  for (auto s : {need_int(env::kRank, &w.rank), need_int(env::kWorldSize, &w.world_size),
                 need_int(env::kLocalRank, &w.local_rank), need_int(env::kLocalWorldSize, &w.local_world_size),
                 need_int(env::kGroupRank, &w.node_rank), need_int(env::kRound, &w.round)}) {
    if (!s.ok()) return s;
  }
  absl::StatusOr<client::GrpcStoreOptions> store = client::GrpcStoreOptionsFromEnv();
  if (!store.ok()) return store.status();
  w.store_endpoint = store->endpoint;
  w.run_id = store->run_id;
  w.token = store->token;
  w.node_addr = env::Get(env::kNodeAddr).value_or("");
  return w;
}

namespace {

std::atomic<int> g_mesh_counter{0};

std::string Joined(const std::vector<int>& v) { return absl::StrJoin(v, ","); }

// A short digest of the rank array (FNV-1a), so that members built over
// different rank arrays disagree; "0..n-1" for the identity array.
std::string RanksDigest(const MeshLayout& layout) {
  bool identity = true;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < layout.ranks().size(); ++i) {
    identity = identity && layout.ranks()[i] == static_cast<int>(i);
    h = (h ^ static_cast<uint64_t>(layout.ranks()[i])) * 1099511628211ULL;
  }
  return identity ? absl::StrCat("0..", layout.ranks().size() - 1) : absl::StrCat(absl::Hex(h, absl::kZeroPad16));
}

// The store key namespace of a mesh: write-once keys (common/store.h's
// kWriteOncePrefix), or mutable ones that ReleaseStoreKeys may delete.
std::string KeyRoot(const MeshOptions& options, const std::string& mesh_id) {
  return absl::StrCat(options.releasable_keys ? "meshtmp/" : kWriteOncePrefix, mesh_id);
}

GroupSpec RowSpec(const std::string& key_root, const std::string& mesh_id, const MeshLayout& layout, int dim,
                  const std::vector<int>& coord, const std::string& key_dim) {
  GroupSpec spec;
  int row = layout.RowOf(dim, coord);
  spec.dim_name = layout.dim_names()[dim];
  spec.key = absl::StrCat(key_root, "/", key_dim, "/row", row);
  spec.name = absl::StrCat(mesh_id, "/", spec.dim_name, "/row", row);
  spec.ranks = layout.RowRanks(dim, row);
  spec.group_rank = coord[dim];
  return spec;
}


// What this member tells the others about a mesh of `layout` (the root mesh,
// or a flattened row's merged layout), for the agreement check.
Description MemberDescription(const MeshState& state, const MeshLayout& layout) {
  Description desc{DeviceTypeName(state.device), state.backend.name, Joined(layout.shape()),
                   absl::StrJoin(layout.dim_names(), ","), state.world.rank, RanksDigest(layout),
                   state.world.node_rank, state.world.local_rank, state.backend.device_id};
  desc.checks = state.options.everyone_checks_up_to;
  return desc;
}

}  // namespace

absl::StatusOr<DeviceMesh> InitDeviceMeshImpl(DeviceType device, MeshLayout layout, const World& world,
                                              const MeshOptions& options) {
  // Gloo counts in whole milliseconds and adds the timeout to "now" (an
  // infinite one overflowed into an immediate timeout).
  if (options.timeout < absl::Milliseconds(1) || options.timeout > absl::Hours(24 * 7)) {
    return absl::InvalidArgumentError(absl::StrCat("mesh timeout ", absl::FormatDuration(options.timeout),
                                                   ": allowed 1ms to 168h"));
  }
  if (options.watchdog_interval < absl::Milliseconds(1) || options.watchdog_interval > absl::Hours(1)) {
    return absl::InvalidArgumentError(absl::StrCat("watchdog_interval ", absl::FormatDuration(options.watchdog_interval),
                                                   ": allowed 1ms to 1h"));
  }
  if (options.everyone_checks_up_to < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("everyone_checks_up_to ", options.everyone_checks_up_to, ": allowed 0 or more members"));
  }
  if (options.gloo_loop_nice < 0 || options.gloo_loop_nice > 19) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo_loop_nice ", options.gloo_loop_nice, ": allowed 0 (unchanged) to 19"));
  }
  auto state = std::make_shared<MeshState>();
  state->device = device;
  state->world = world;
  state->options = options;
  state->root = layout;
  state->mesh_id = options.mesh_id.empty() ? absl::StrCat("m", g_mesh_counter.fetch_add(1)) : options.mesh_id;
  state->coordinate = layout.CoordinateOf(world.rank);
  std::vector<int> dims;
  for (int d = 0; d < layout.ndim(); ++d) dims.push_back(d);
  if (!state->coordinate) {
    // Not a member: no store traffic, no communicators.
    return DeviceMesh(state, dims, layout);
  }
  client::GrpcStoreOptions so;
  so.endpoint = world.store_endpoint;
  so.run_id = world.run_id;
  so.round = world.round;
  so.token = world.token;
  // TLS to the server as the worker's environment says (MESHRUN_TLS_*).
  if (absl::StatusOr<client::GrpcStoreOptions> env_store = client::GrpcStoreOptionsFromEnv(); env_store.ok()) {
    so.tls = std::move(env_store->tls);
  }
  so.connect_timeout = options.timeout;
  // A store request may take its own wait plus this much: at most the mesh
  // timeout again, so an unreachable store fails within twice the timeout.
  so.rpc_slack = std::min(so.rpc_slack, options.timeout);
  // The connection comes up while the backend sets up locally (Gloo's
  // listening pairs); the first store request waits for it.
  so.wait_for_connection = false;
  absl::StatusOr<std::shared_ptr<Store>> store = client::ConnectGrpcStore(so);
  if (!store.ok()) return store.status();
  state->store = *store;
  if (options.releasable_keys) {
    state->recorded = std::make_shared<internal::RecordingStore>(state->store);
    state->store = state->recorded;
  }

  absl::StatusOr<internal::Backend> backend =
      device == DeviceType::kCpu ? internal::MakeGlooBackend(state->store, world, options)
                                 : internal::MakeNcclBackend(state->store, world, options);
  if (!backend.ok()) return backend.status();
  state->backend = std::move(*backend);

  std::vector<GroupSpec> rows;
  for (int d = 0; d < layout.ndim(); ++d) {
    // Keys use the dimension's index, not its name: members that disagree on
    // the names still meet, and the agreement check reports the difference.
    rows.push_back(RowSpec(KeyRoot(options, state->mesh_id), state->mesh_id, layout, d, *state->coordinate,
                           absl::StrCat("d", d)));
  }
  internal::Agreement agreement{MemberDescription(*state, layout), KeyRoot(options, state->mesh_id), layout.ranks(),
                                [layout](int r) {
                                  std::optional<std::vector<int>> c = layout.CoordinateOf(r);
                                  return c ? absl::StrCat("rank ", r, " (coordinate (", absl::StrJoin(*c, ", "),
                                                          ") in ", layout.NamesString(), ")")
                                           : absl::StrCat("rank ", r);
                                },
                                options.everyone_checks_up_to};
  absl::StatusOr<std::vector<std::unique_ptr<ProcessGroup>>> groups = state->backend.create_groups(rows, agreement);
  if (!groups.ok()) {
    return absl::Status(groups.status().code(),
                        absl::StrCat("rank ", world.rank, ": init_device_mesh(", DeviceTypeName(device), ", ",
                                     layout.ShapeString(), ", ", layout.NamesString(), "): ",
                                     groups.status().message()));
  }
  state->groups = std::move(*groups);
  state->backend.StartWatchdog(state->AllGroups());
  return DeviceMesh(state, dims, layout);
}

absl::StatusOr<DeviceMesh> InitDeviceMesh(absl::string_view device_type, std::vector<int> shape,
                                          std::vector<std::string> dim_names, const World& world,
                                          const MeshOptions& options) {
  absl::StatusOr<DeviceType> device = ParseDeviceType(device_type);
  if (!device.ok()) return device.status();
  absl::StatusOr<MeshLayout> layout = MeshLayout::Create(std::move(shape), std::move(dim_names), world.world_size);
  if (!layout.ok()) return layout.status();
  return InitDeviceMeshImpl(*device, std::move(*layout), world, options);
}

absl::StatusOr<DeviceMesh> InitDeviceMesh(absl::string_view device_type, std::vector<int> shape,
                                          std::vector<std::string> dim_names, const MeshOptions& options) {
  absl::StatusOr<World> world = WorldFromEnv();
  if (!world.ok()) return world.status();
  return InitDeviceMesh(device_type, std::move(shape), std::move(dim_names), *world, options);
}

absl::StatusOr<DeviceMesh> InitDeviceMeshFromRanks(absl::string_view device_type, std::vector<int> ranks,
                                                   std::vector<int> shape, std::vector<std::string> dim_names,
                                                   const World& world, const MeshOptions& options) {
  absl::StatusOr<DeviceType> device = ParseDeviceType(device_type);
  if (!device.ok()) return device.status();
  if (ranks.empty()) return absl::InvalidArgumentError("the rank array of a mesh must not be empty");
  absl::StatusOr<MeshLayout> layout =
      MeshLayout::Create(std::move(shape), std::move(dim_names), world.world_size, std::move(ranks));
  if (!layout.ok()) return layout.status();
  return InitDeviceMeshImpl(*device, std::move(*layout), world, options);
}

absl::StatusOr<DeviceMesh> DeviceMesh::Flatten(const std::string& name_in) const {
  if (!is_member()) return NotMemberError(rank());
  // Already flat, as PyTorch: a 1-D mesh flattened under its own name (or
  // none), a flattened one included.
  if (ndim() == 1 && (name_in.empty() || name_in == dim_names()[0])) return *this;
  for (int ref : dims_) {
    if (ref >= kFlatBase) return absl::InvalidArgumentError("cannot flatten a mesh that has a flattened dimension");
  }
  for (size_t i = 1; i < dims_.size(); ++i) {
    if (dims_[i] != dims_[i - 1] + 1) {
      return absl::InvalidArgumentError(absl::StrCat("only adjacent mesh dimensions can be flattened; (",
                                                     absl::StrJoin(dim_names(), ", "), ") are not adjacent"));
    }
  }
  const std::string name = name_in.empty() ? absl::StrJoin(dim_names(), "_") : name_in;
  const int first = dims_.front();
  const int last = dims_.back();
  const MeshLayout& root = state_->root;
  if (root.DimIndex(name) >= 0 && !(first == last && root.dim_names()[first] == name)) {
    return absl::InvalidArgumentError(absl::StrCat("flattened name '", name, "' is already a mesh dimension name"));
  }
  absl::StatusOr<MeshLayout> flat_layout =
      MeshLayout::Create({size()}, {name}, state_->world.world_size, layout_.ranks());
  if (!flat_layout.ok()) return flat_layout.status();
  {
    absl::MutexLock lock(&state_->mu);
    auto it = state_->flat_index.find(name);
    if (it != state_->flat_index.end()) {
      const FlatEntry& existing = state_->flattened[it->second];
      if (existing.first != first || existing.last != last) {
        return absl::InvalidArgumentError(absl::StrCat("'", name, "' already names a different flattened mesh"));
      }
      return DeviceMesh(state_, {kFlatBase + it->second}, std::move(*flat_layout));
    }
  }
  {
    // Collective among the members of this flattened row only; the mesh's
    // lock is not held meanwhile (Abort and GetGroup stay responsive).
    MeshLayout merged = root.Flattened(first, last, name);
    std::vector<int> coord = *merged.CoordinateOf(rank());
    GroupSpec spec = RowSpec(KeyRoot(state_->options, state_->mesh_id), state_->mesh_id, merged, first, coord,
                             absl::StrCat("flat/", name));
    internal::Agreement agreement{MemberDescription(*state_, merged), spec.key, spec.ranks, [spec](int r) {
                                    auto it = std::find(spec.ranks.begin(), spec.ranks.end(), r);
                                    return absl::StrCat("rank ", r, " (coordinate ", it - spec.ranks.begin(),
                                                        " along '", spec.dim_name, "')");
                                  },
                                  state_->options.everyone_checks_up_to};
    absl::StatusOr<std::vector<std::unique_ptr<ProcessGroup>>> groups =
        state_->backend.create_groups({spec}, agreement);
    if (!groups.ok()) return groups.status();
    FlatEntry entry{first, last, std::move((*groups)[0])};
    state_->backend.WatchGroup(entry.group.get());
    absl::MutexLock lock(&state_->mu);
    state_->flattened.push_back(std::move(entry));
    int index = static_cast<int>(state_->flattened.size()) - 1;
    state_->flat_index.emplace(name, index);
    return DeviceMesh(state_, {kFlatBase + index}, std::move(*flat_layout));
  }
}

}  // namespace meshrun::mesh
