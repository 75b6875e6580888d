#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "mesh_internal.h"

namespace meshrun::mesh::internal {

std::string Description::Encode() const {
  return absl::StrCat("device=", device, ";backend=", backend, ";shape=", shape, ";names=", names, ";ranks=", ranks,
                      ";rank=", rank, ";node=", node, ";local_rank=", local_rank, ";gpu=", gpu, ";checks=", checks);
}

Description Description::Decode(const std::string& text) {
  Description d;
  for (absl::string_view field : absl::StrSplit(text, ';')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
    if (kv.first == "device") d.device = kv.second;
    if (kv.first == "backend") d.backend = kv.second;
    if (kv.first == "shape") d.shape = kv.second;
    if (kv.first == "names") d.names = kv.second;
    if (kv.first == "ranks") d.ranks = kv.second;
    if (kv.first == "rank") (void)absl::SimpleAtoi(kv.second, &d.rank);
    if (kv.first == "node") (void)absl::SimpleAtoi(kv.second, &d.node);
    if (kv.first == "local_rank") (void)absl::SimpleAtoi(kv.second, &d.local_rank);
    if (kv.first == "gpu") d.gpu = kv.second;
    if (kv.first == "checks") (void)absl::SimpleAtoi(kv.second, &d.checks);
  }
  return d;
}

std::string Description::Diff(const Description& o) const {
  if (shape != o.shape) return absl::StrCat("shape: (", shape, ") vs (", o.shape, ")");
  if (names != o.names) return absl::StrCat("dim names: (", names, ") vs (", o.names, ")");
  if (device != o.device) return absl::StrCat("device type: ", device, " vs ", o.device);
  if (backend != o.backend) return absl::StrCat("backend: ", backend, " vs ", o.backend);
  if (ranks != o.ranks) return absl::StrCat("rank array: ", ranks, " vs ", o.ranks);
  if (checks != o.checks) return absl::StrCat("everyone_checks_up_to: ", checks, " vs ", o.checks);
  return "";
}

absl::Status MismatchError(const Description& mine, const Description& theirs, const std::string& diff) {
  return absl::FailedPreconditionError(absl::StrCat("mesh mismatch: rank ", mine.rank, " and rank ", theirs.rank,
                                                    " disagree on the ", diff, " (rank ", mine.rank, " vs rank ",
                                                    theirs.rank, ")"));
}

}  // namespace meshrun::mesh::internal
