// Pure layout arithmetic of an N-d device mesh: which global rank sits at
// which coordinate, and the groups (rows) of every mesh dimension. No
// communication; used by DeviceMesh and by `meshrun mesh`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace meshrun::mesh {

class MeshLayout {
 public:
  // Builds the layout of `shape` (each entry >= 1, or one entry -1 to be
  // inferred) named `dim_names` (one per dimension, unique, non-empty; or all
  // empty for an unnamed mesh, then "dim_<i>" is used), over `ranks` (the
  // global ranks in row-major order; empty = 0..world_size-1).
  // INVALID_ARGUMENT, PyTorch's wording where it has one, naming the values:
  // "mesh shape (2, 4) has 8 ranks but the world size is 6", "mesh_shape and
  // mesh_dim_names should have same length", "Each mesh_dim_name must be
  // unique. Found repeated mesh_dim_name 'x'", an empty name, more than one
  // -1, a size that does not divide, duplicate ranks, ranks outside
  // 0..world_size-1. Mirrors torch's init_device_mesh / DeviceMesh(mesh=...).
  static absl::StatusOr<MeshLayout> Create(std::vector<int> shape, std::vector<std::string> dim_names,
                                           int world_size, std::vector<int> ranks = {});

  int ndim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int>& shape() const { return shape_; }
  const std::vector<std::string>& dim_names() const { return names_; }
  // Every member's global rank, row-major.
  const std::vector<int>& ranks() const { return ranks_; }
  int size() const { return static_cast<int>(ranks_.size()); }

  // The coordinate of global `rank`, or nullopt when it is not a member.
  std::optional<std::vector<int>> CoordinateOf(int rank) const;
  // The global rank at `coordinate`.
  int RankAt(absl::Span<const int> coordinate) const;
  // Index of `name` among the dimensions, or -1.
  int DimIndex(const std::string& name) const;

  // The number of groups (rows) along dimension `dim`: size() / shape[dim].
  int RowCount(int dim) const;
  // The row of `coordinate` along `dim`: the row-major index of the other
  // coordinates.
  int RowOf(int dim, absl::Span<const int> coordinate) const;
  // The global ranks of row `row` of dimension `dim`, by coordinate along dim.
  std::vector<int> RowRanks(int dim, int row) const;
  // Every row of `dim`, in row order (PyTorch's group list for that dim).
  std::vector<std::vector<int>> Groups(int dim) const;

  // The same mesh with the dimensions `first`..`last` (adjacent, inclusive)
  // merged into one named `name`.
  MeshLayout Flattened(int first, int last, const std::string& name) const;

  // "(2, 4)" and "(replicate, shard)".
  std::string ShapeString() const;
  std::string NamesString() const;

 private:
  std::vector<int> shape_;
  std::vector<std::string> names_;
  std::vector<int> ranks_;
  std::vector<int> coord_of_rank_index_;  // Flat index of each global rank, -1 when absent.
};

}  // namespace meshrun::mesh
