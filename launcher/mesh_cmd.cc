#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_join.h"
#include "launcher/cli.h"
#include "launcher/launch.h"
#include "meshrun/mesh_layout.h"

namespace meshrun::launcher {
namespace {

// "{0-3}" for a run of 3 or more consecutive ranks, else "{0, 4}".
std::string GroupText(const std::vector<int>& g) {
  bool consecutive = g.size() >= 3;
  for (size_t i = 1; i < g.size() && consecutive; ++i) consecutive = g[i] == g[i - 1] + 1;
  if (consecutive) return absl::StrCat("{", g.front(), "-", g.back(), "}");
  return absl::StrCat("{", absl::StrJoin(g, ", "), "}");
}

// The largest mesh, in ranks, whose rank grid `meshrun mesh` draws; beyond
// it only the dimensions' groups are listed.
constexpr int kMaxDrawnRanks = 4096;

// `text` followed by spaces up to `w` columns (`text` is never wider).
std::string PadTo(const std::string& text, size_t w) { return text + std::string(w - text.size(), ' '); }

// Appends `line` to `out` without its trailing spaces, then a newline.
void AppendLine(std::string* out, const std::string& line) {
  absl::StrAppend(out, line.substr(0, line.find_last_not_of(' ') + 1), "\n");
}

// The rank grids: rows are the second-to-last dimension, columns the last;
// one grid per index of the leading dimensions, each cell
// "<rank> (n<node>:l<local rank>)".
std::string RankGrids(const mesh::MeshLayout& layout, int nproc) {
  const int nd = layout.ndim();
  const std::vector<int>& shape = layout.shape();
  const int cols = shape[nd - 1];
  const int rows = nd >= 2 ? shape[nd - 2] : 1;
  const int grids = layout.size() / (rows * cols);
  const std::string& col_name = layout.dim_names()[nd - 1];
  const std::string row_name = nd >= 2 ? layout.dim_names()[nd - 2] : "";
  auto cell = [nproc](int r) { return absl::StrCat(r, " (n", r / nproc, ":l", r % nproc, ")"); };
  size_t cell_width = 0;
  for (int r : layout.ranks()) cell_width = std::max(cell_width, cell(r).size());
  // Each column as wide as its widest cell or its header ("tp=3").
  std::vector<std::string> headers(cols);
  std::vector<size_t> col_width(cols);
  for (int c = 0; c < cols; ++c) {
    headers[c] = absl::StrCat(col_name, "=", c);
    col_width[c] = std::max(cell_width, headers[c].size());
  }
  // Wide enough for the last row's label ("dp=1115") plus two spaces; a 1-D
  // mesh (one unlabelled row) gets the same 4-column indent as "x=0".
  const size_t label_width = absl::StrCat(row_name, "=", rows - 1).size() + 2;
  std::string out;
  for (int g = 0; g < grids; ++g) {
    std::vector<int> coord(nd, 0);
    int rest = g;
    for (int d = nd - 3; d >= 0; --d) {
      coord[d] = rest % shape[d];
      rest /= shape[d];
    }
    std::vector<std::string> lead;
    for (int d = 0; d + 2 < nd; ++d) lead.push_back(absl::StrCat(layout.dim_names()[d], "=", coord[d]));
    absl::StrAppend(&out, "\n");
    if (!lead.empty()) absl::StrAppend(&out, absl::StrJoin(lead, ", "), ":\n");
    std::string line(label_width, ' ');
    for (int c = 0; c < cols; ++c) absl::StrAppend(&line, "  ", PadTo(headers[c], col_width[c]));
    AppendLine(&out, line);
    for (int r = 0; r < rows; ++r) {
      std::string row = PadTo(nd >= 2 ? absl::StrCat(row_name, "=", r) : "", label_width);
      if (nd >= 2) coord[nd - 2] = r;
      for (int c = 0; c < cols; ++c) {
        coord[nd - 1] = c;
        absl::StrAppend(&row, "  ", PadTo(cell(layout.RankAt(coord)), col_width[c]));
      }
      AppendLine(&out, row);
    }
  }
  return out;
}

int Usage(const std::string& msg) {
  std::fprintf(stderr, "meshrun mesh: error: %s\n", msg.c_str());
  return 2;
}

}  // namespace

std::string DescribeMesh(const mesh::MeshLayout& layout, int nnodes, int nproc) {
  auto node_of = [nproc](int rank) { return rank / nproc; };
  std::string out = absl::StrCat("mesh ", layout.ShapeString(), " named ", layout.NamesString(), " over ",
                                 layout.size(), " ranks (", nnodes, nnodes == 1 ? " node x " : " nodes x ", nproc,
                                 nproc == 1 ? " worker)\n" : " workers)\n");
  const int nd = layout.ndim();
  const std::vector<int>& shape = layout.shape();
  if (layout.size() > kMaxDrawnRanks) {
    absl::StrAppend(&out, "\n(grid of ", layout.size(), " ranks not drawn)\n");
  } else {
    absl::StrAppend(&out, RankGrids(layout, nproc));
  }
  absl::StrAppend(&out, "\n");
  for (int d = 0; d < nd; ++d) {
    std::vector<std::vector<int>> groups = layout.Groups(d);
    bool within = true;
    for (const auto& grp : groups) {
      for (int r : grp) within = within && node_of(r) == node_of(grp[0]);
    }
    std::vector<std::string> texts;
    for (size_t i = 0; i < groups.size() && i < 16; ++i) texts.push_back(GroupText(groups[i]));
    if (groups.size() > 16) texts.push_back(absl::StrCat("... (", groups.size() - 16, " more)"));
    absl::StrAppend(&out, "dimension '", layout.dim_names()[d], "' (size ", shape[d], ", ", groups.size(),
                    groups.size() == 1 ? " group, " : " groups, ",
                    within ? "stays inside a node" : "crosses nodes", "): ", absl::StrJoin(texts, " "), "\n");
  }
  return out;
}

int MeshMain(int argc, char** argv) {
  CLI::App app{"meshrun mesh: print a mesh layout (ranks, nodes, groups) without running anything",
               "meshrun mesh"};
  int nnodes = 1, nproc = 1;
  std::vector<int> shape;
  std::string names_text;
  app.add_option("--nnodes", nnodes, "Number of nodes")->default_str("1");
  app.add_option("--nproc_per_node,--nproc-per-node", nproc, "Workers per node")->default_str("1");
  app.add_option("--shape", shape, "Mesh shape, e.g. 2,4 (one entry may be -1)")->delimiter(',')->required();
  // Split here, not by CLI11, which drops empty entries ("a," must say that
  // a name is empty).
  app.add_option("--names", names_text, "Dimension names, e.g. replicate,shard");
  if (std::optional<int> done = ParseCli(app, argc, argv, "meshrun mesh")) return *done;
  if (nnodes <= 0 || nproc <= 0) {
    return Usage(absl::StrCat("--nnodes=", nnodes, " --nproc_per_node=", nproc, ": both must be >= 1"));
  }
  constexpr long long kMaxRanks = 1 << 20;
  if (static_cast<long long>(nnodes) * nproc > kMaxRanks) {
    return Usage(absl::StrCat("--nnodes=", nnodes, " x --nproc_per_node=", nproc, " is more than ", kMaxRanks,
                              " ranks"));
  }
  std::vector<std::string> names;
  if (app.count("--names") > 0) names = absl::StrSplit(names_text, ',');
  absl::StatusOr<mesh::MeshLayout> layout = mesh::MeshLayout::Create(shape, names, nnodes * nproc);
  if (!layout.ok()) return Usage(std::string(layout.status().message()));
  std::fputs(DescribeMesh(*layout, nnodes, nproc).c_str(), stdout);
  return 0;
}

}  // namespace meshrun::launcher
