#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshrun/mesh_layout.h"

namespace meshrun::mesh {
namespace {

std::string Tuple(const std::vector<int>& v) {
  if (v.size() == 1) return absl::StrCat("(", v[0], ",)");
  return absl::StrCat("(", absl::StrJoin(v, ", "), ")");
}

}  // namespace

absl::StatusOr<MeshLayout> MeshLayout::Create(std::vector<int> shape, std::vector<std::string> dim_names,
                                              int world_size, std::vector<int> ranks) {
  if (shape.empty()) return absl::InvalidArgumentError("mesh shape must have at least one dimension");
  const int members = ranks.empty() ? world_size : static_cast<int>(ranks.size());
  int inferred = -1;
  long long known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0) {
        return absl::InvalidArgumentError(absl::StrCat("mesh shape ", Tuple(shape),
                                                       ": at most one dimension may be -1"));
      }
      inferred = static_cast<int>(i);
    } else if (shape[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("mesh shape ", Tuple(shape), ": sizes must be >= 1 (or -1)"));
    } else if (__builtin_mul_overflow(known, static_cast<long long>(shape[i]), &known)) {
      // Sizes whose product overflows are refused, never wrapped.
      return absl::InvalidArgumentError(absl::StrCat("mesh shape ", Tuple(shape), " has more ranks than ",
                                                     std::numeric_limits<long long>::max(), "; ",
                                                     members, " ranks to lay out"));
    }
  }
  if (inferred >= 0) {
    if (known == 0 || members % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat("mesh shape ", Tuple(shape), ": ", members,
                                                     " ranks cannot be divided by ", known));
    }
    shape[inferred] = static_cast<int>(members / known);
  }
  long long product = 1;
  for (int s : shape) product *= s;
  if (product != members) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh shape ", Tuple(shape), " has ", product, " ranks but ",
        ranks.empty() ? absl::StrCat("the world size is ", world_size)
                      : absl::StrCat("the rank array has ", members)));
  }
  bool all_empty = std::all_of(dim_names.begin(), dim_names.end(), [](const auto& n) { return n.empty(); });
  if (dim_names.empty()) all_empty = true;
  if (!dim_names.empty() && dim_names.size() != shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh_shape and mesh_dim_names should have same length! Found len(mesh_dim_names): ", dim_names.size(),
        " and len(mesh_shape):", shape.size(), "."));
  }
  if (all_empty) {
    dim_names.clear();
    for (size_t i = 0; i < shape.size(); ++i) dim_names.push_back(absl::StrCat("dim_", i));
  } else {
    std::set<std::string> seen;
    for (const auto& n : dim_names) {
      if (n.empty()) return absl::InvalidArgumentError("mesh dimension names must not be empty");
      if (n.find_first_of(";=,/ ") != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("mesh dimension name '", n,
                                                       "' may not contain ';', '=', ',', '/' or spaces"));
      }
      if (!seen.insert(n).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Each mesh_dim_name must be unique. Found repeated mesh_dim_name '", n, "' in mesh_dim_names (",
            absl::StrJoin(dim_names, ", "), ")"));
      }
    }
  }
  if (ranks.empty()) {
    ranks.resize(world_size);
    std::iota(ranks.begin(), ranks.end(), 0);
  }
  MeshLayout l;
  l.coord_of_rank_index_.assign(world_size, -1);
  for (size_t i = 0; i < ranks.size(); ++i) {
    int r = ranks[i];
    if (r < 0 || r >= world_size) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, " in the mesh is outside the world 0..",
                                                     world_size - 1));
    }
    if (l.coord_of_rank_index_[r] >= 0) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, " appears twice in the mesh"));
    }
    l.coord_of_rank_index_[r] = static_cast<int>(i);
  }
  l.shape_ = std::move(shape);
  l.names_ = std::move(dim_names);
  l.ranks_ = std::move(ranks);
  return l;
}

std::optional<std::vector<int>> MeshLayout::CoordinateOf(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(coord_of_rank_index_.size())) return std::nullopt;
  int flat = coord_of_rank_index_[rank];
  if (flat < 0) return std::nullopt;
  std::vector<int> c(shape_.size());
  for (int d = ndim() - 1; d >= 0; --d) {
    c[d] = flat % shape_[d];
    flat /= shape_[d];
  }
  return c;
}

int MeshLayout::RankAt(absl::Span<const int> coordinate) const {
  int flat = 0;
  for (int d = 0; d < ndim(); ++d) flat = flat * shape_[d] + coordinate[d];
  return ranks_[flat];
}

int MeshLayout::DimIndex(const std::string& name) const {
  auto it = std::find(names_.begin(), names_.end(), name);
  return it == names_.end() ? -1 : static_cast<int>(it - names_.begin());
}

int MeshLayout::RowCount(int dim) const { return size() / shape_[dim]; }

int MeshLayout::RowOf(int dim, absl::Span<const int> coordinate) const {
  int row = 0;
  for (int d = 0; d < ndim(); ++d) {
    if (d == dim) continue;
    row = row * shape_[d] + coordinate[d];
  }
  return row;
}

std::vector<int> MeshLayout::RowRanks(int dim, int row) const {
  std::vector<int> c(shape_.size());
  for (int d = ndim() - 1; d >= 0; --d) {
    if (d == dim) continue;
    c[d] = row % shape_[d];
    row /= shape_[d];
  }
  std::vector<int> out;
  for (int i = 0; i < shape_[dim]; ++i) {
    c[dim] = i;
    out.push_back(RankAt(c));
  }
  return out;
}

std::vector<std::vector<int>> MeshLayout::Groups(int dim) const {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < RowCount(dim); ++r) out.push_back(RowRanks(dim, r));
  return out;
}

MeshLayout MeshLayout::Flattened(int first, int last, const std::string& name) const {
  MeshLayout l = *this;
  int merged = 1;
  for (int d = first; d <= last; ++d) merged *= shape_[d];
  l.shape_.erase(l.shape_.begin() + first, l.shape_.begin() + last + 1);
  l.shape_.insert(l.shape_.begin() + first, merged);
  l.names_.erase(l.names_.begin() + first, l.names_.begin() + last + 1);
  l.names_.insert(l.names_.begin() + first, name);
  return l;
}

std::string MeshLayout::ShapeString() const { return Tuple(shape_); }
std::string MeshLayout::NamesString() const { return absl::StrCat("(", absl::StrJoin(names_, ", "), ")"); }

}  // namespace meshrun::mesh
