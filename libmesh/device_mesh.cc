// A DeviceMesh handle: its accessors, slicing (operator[]), its process
// groups, Abort and ReleaseStoreKeys. Creating and flattening a mesh live in
// mesh_create.cc; the state they share in mesh_state.h.
#include "meshrun/device_mesh.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "mesh_state.h"

namespace meshrun::mesh {

size_t SizeOf(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
  }
  return 0;
}

const char* DeviceTypeName(DeviceType type) { return type == DeviceType::kCpu ? "cpu" : "cuda"; }

DeviceMesh::DeviceMesh(std::shared_ptr<MeshState> state, std::vector<int> dims, MeshLayout layout)
    : state_(std::move(state)), dims_(std::move(dims)), layout_(std::move(layout)) {}

int DeviceMesh::ndim() const { return layout_.ndim(); }
std::vector<int> DeviceMesh::shape() const { return layout_.shape(); }
int DeviceMesh::size(int dim) const {
  if (dim < 0) return layout_.size();
  return dim < ndim() ? layout_.shape()[dim] : 0;
}
const std::vector<std::string>& DeviceMesh::dim_names() const { return layout_.dim_names(); }
DeviceType DeviceMesh::device_type() const { return state_->device; }
int DeviceMesh::rank() const { return state_->world.rank; }
bool DeviceMesh::is_member() const { return state_->coordinate.has_value(); }
std::optional<std::vector<int>> DeviceMesh::coordinate() const {
  if (!is_member()) return std::nullopt;
  return layout_.CoordinateOf(state_->world.rank);
}
std::vector<int> DeviceMesh::ranks() const { return layout_.ranks(); }
const MeshLayout& DeviceMesh::layout() const { return layout_; }

namespace {

absl::Status UnknownDim(const std::string& name, const std::vector<std::string>& valid) {
  return absl::NotFoundError(absl::StrCat("Mesh dimension '", name, "' does not exist. Valid mesh_dim_names are [",
                                          absl::StrJoin(valid, ", "), "]"));
}

}  // namespace

absl::StatusOr<int> DeviceMesh::local_rank(int dim) const {
  if (!is_member()) return NotMemberError(rank());
  if (dim < 0 || dim >= ndim()) {
    return absl::InvalidArgumentError(absl::StrCat("mesh dimension ", dim, " outside 0..", ndim() - 1));
  }
  return (*coordinate())[dim];
}

absl::StatusOr<int> DeviceMesh::local_rank(const std::string& dim_name) const {
  int d = layout_.DimIndex(dim_name);
  if (d < 0) return UnknownDim(dim_name, dim_names());
  return local_rank(d);
}

absl::StatusOr<DeviceMesh> DeviceMesh::operator[](const std::string& dim_name) const {
  return (*this)[std::vector<std::string>{dim_name}];
}

absl::StatusOr<DeviceMesh> DeviceMesh::operator[](const std::vector<std::string>& names) const {
  if (!is_member()) return NotMemberError(rank());
  if (names.empty()) return absl::InvalidArgumentError("slicing needs at least one mesh dimension name");
  std::vector<int> picked;
  for (const auto& n : names) {
    int d = layout_.DimIndex(n);
    if (d < 0) {
      return absl::NotFoundError(absl::StrCat("Invalid mesh_dim_names (", absl::StrJoin(names, ", "),
                                              ") specified. Valid mesh_dim_names are [",
                                              absl::StrJoin(dim_names(), ", "), "]."));
    }
    if (!picked.empty() && d <= picked.back()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Invalid mesh_dim_names (", absl::StrJoin(names, ", "),
          ") specified. Mesh dim indices should be in ascending order (the parent's order is (",
          absl::StrJoin(dim_names(), ", "), ")), without repeats."));
    }
    picked.push_back(d);
  }
  if (picked.size() == static_cast<size_t>(ndim())) return *this;
  // The sub-mesh containing this rank: the other coordinates stay fixed.
  std::vector<int> coord = *coordinate();
  std::vector<int> sub_shape;
  std::vector<std::string> sub_names;
  for (int d : picked) {
    sub_shape.push_back(layout_.shape()[d]);
    sub_names.push_back(layout_.dim_names()[d]);
  }
  std::vector<int> sub_ranks;
  int total = 1;
  for (int s : sub_shape) total *= s;
  std::vector<int> c = coord;
  for (int flat = 0; flat < total; ++flat) {
    int rest = flat;
    for (int i = static_cast<int>(picked.size()) - 1; i >= 0; --i) {
      c[picked[i]] = rest % sub_shape[i];
      rest /= sub_shape[i];
    }
    sub_ranks.push_back(layout_.RankAt(c));
  }
  absl::StatusOr<MeshLayout> sub =
      MeshLayout::Create(sub_shape, sub_names, state_->world.world_size, std::move(sub_ranks));
  if (!sub.ok()) return sub.status();
  std::vector<int> sub_dims;
  for (int d : picked) sub_dims.push_back(dims_[d]);
  return DeviceMesh(state_, std::move(sub_dims), std::move(*sub));
}

absl::StatusOr<ProcessGroup*> DeviceMesh::GetGroup(int dim) const {
  if (!is_member()) return NotMemberError(rank());
  if (dim < 0 || dim >= ndim()) {
    return absl::InvalidArgumentError(absl::StrCat("mesh dimension ", dim, " outside 0..", ndim() - 1));
  }
  int ref = dims_[dim];
  if (ref < kFlatBase) return state_->groups[ref].get();
  absl::MutexLock lock(&state_->mu);
  return state_->flattened[ref - kFlatBase].group.get();
}

absl::StatusOr<ProcessGroup*> DeviceMesh::GetGroup(const std::string& dim_name) const {
  int d = layout_.DimIndex(dim_name);
  if (d < 0) return UnknownDim(dim_name, dim_names());
  return GetGroup(d);
}

absl::StatusOr<ProcessGroup*> DeviceMesh::GetGroup() const {
  if (ndim() != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Found the DeviceMesh have ", ndim(),
        " dimensions. Optional kwarg `mesh_dim` needs to be specified when device_mesh.ndim > 1."));
  }
  return GetGroup(0);
}

absl::StatusOr<std::vector<ProcessGroup*>> DeviceMesh::GetAllGroups() const {
  std::vector<ProcessGroup*> out;
  for (int d = 0; d < ndim(); ++d) {
    absl::StatusOr<ProcessGroup*> g = GetGroup(d);
    if (!g.ok()) return g.status();
    out.push_back(*g);
  }
  return out;
}


void DeviceMesh::Abort() const {
  for (ProcessGroup* g : state_->AllGroups()) {
    if (g != nullptr) g->Abort();
  }
}

std::shared_ptr<internal::RecordingStore> internal::KeysWritten(const DeviceMesh& mesh) {
  return mesh.state_->recorded;
}

absl::Status DeviceMesh::ReleaseStoreKeys() const {
  if (!state_->options.releasable_keys) {
    return absl::FailedPreconditionError(absl::StrCat("mesh ", state_->mesh_id,
                                                      ": its store keys are write-once (MeshOptions::releasable_keys "
                                                      "was false); they stay until the run ends"));
  }
  if (state_->recorded == nullptr) return absl::OkStatus();  // Not a member: it wrote nothing.
  return state_->recorded->DeleteWritten();
}

}  // namespace meshrun::mesh
