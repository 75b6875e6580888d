#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "mesh_internal.h"

namespace meshrun::mesh::internal {

std::string Description::Encode() const {
  return absl::StrCat("device=", device, ";backend=", backend, ";shape=", shape, ";names=", names, ";rank=", rank);
}

Description Description::Decode(const std::string& text) {
  Description d;
  for (absl::string_view field : absl::StrSplit(text, ';')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
    if (kv.first == "device") d.device = kv.second;
    if (kv.first == "backend") d.backend = kv.second;
    if (kv.first == "shape") d.shape = kv.second;
    if (kv.first == "names") d.names = kv.second;
    if (kv.first == "rank") (void)absl::SimpleAtoi(kv.second, &d.rank);
  }
  return d;
}

std::string Description::Diff(const Description& o) const {
  if (shape != o.shape) return absl::StrCat("shape: (", shape, ") vs (", o.shape, ")");
  if (names != o.names) return absl::StrCat("dim names: (", names, ") vs (", o.names, ")");
  if (device != o.device) return absl::StrCat("device type: ", device, " vs ", o.device);
  if (backend != o.backend) return absl::StrCat("backend: ", backend, " vs ", o.backend);
  return "";
}

std::string MissingMembers(Store& store, const GroupSpec& spec, const std::function<std::string(int)>& key_of) {
  std::vector<std::string> missing;
  for (int c = 0; c < static_cast<int>(spec.ranks.size()); ++c) {
    if (c == spec.group_rank) continue;
    absl::StatusOr<bool> present = store.Check({key_of(c)});
    if (present.ok() && !*present) {
      missing.push_back(absl::StrCat("rank ", spec.ranks[c], " (coordinate ", c, " along '", spec.dim_name, "')"));
    }
  }
  return missing.empty() ? std::string("a member") : absl::StrJoin(missing, ", ");
}

absl::Status CheckDescriptions(Store& store, const std::vector<GroupSpec>& rows, const Description& mine,
                               absl::Duration timeout) {
  const std::string encoded = mine.Encode();
  auto desc_key = [](const GroupSpec& row, int c) { return absl::StrCat(row.key, "/desc/", c); };
  for (const auto& row : rows) {
    if (row.ranks.size() <= 1) continue;
    if (absl::Status s = store.Set(desc_key(row, row.group_rank), encoded); !s.ok()) return s;
  }
  for (const auto& row : rows) {
    if (row.ranks.size() <= 1) continue;
    std::vector<std::string> keys;
    std::vector<int> coords;
    for (int c = 0; c < static_cast<int>(row.ranks.size()); ++c) {
      if (c == row.group_rank) continue;
      keys.push_back(desc_key(row, c));
      coords.push_back(c);
    }
    absl::StatusOr<std::vector<std::string>> peers = store.MultiGet(keys, timeout);
    if (absl::IsDeadlineExceeded(peers.status())) {
      return absl::DeadlineExceededError(absl::StrCat(
          "mesh dimension '", row.dim_name, "': ",
          MissingMembers(store, row, [&](int c) { return desc_key(row, c); }), " did not arrive within ",
          absl::FormatDuration(timeout)));
    }
    if (!peers.ok()) return peers.status();
    for (size_t i = 0; i < peers->size(); ++i) {
      Description theirs = Description::Decode((*peers)[i]);
      std::string diff = mine.Diff(theirs);
      if (!diff.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "mesh mismatch in dimension '", row.dim_name, "' with rank ",
            theirs.rank >= 0 ? theirs.rank : row.ranks[coords[i]], ": ", diff, " (this rank vs that rank)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace meshrun::mesh::internal
