// A run record in parts (record_parts.h).
#include "rendezvous/state/etcd/record_parts.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "rendezvous/state/state.h"

namespace meshrun::rendezvous::state::etcd {

std::string EncodeHead(const PartsHead& head) {
  return absl::StrCat("parts ", head.incarnation, " ", head.seq, " ", head.count, " ", head.bytes);
}

std::optional<PartsHead> DecodeHead(absl::string_view value) {
  if (!absl::ConsumePrefix(&value, "parts ")) return std::nullopt;
  std::vector<absl::string_view> f = absl::StrSplit(value, ' ');
  PartsHead h;
  if (f.size() != 4 || !absl::SimpleAtoi(f[0], &h.incarnation) || !absl::SimpleAtoi(f[1], &h.seq) ||
      !absl::SimpleAtoi(f[2], &h.count) || !absl::SimpleAtoi(f[3], &h.bytes) || h.count < 1 || h.bytes < 0) {
    return std::nullopt;
  }
  return h;
}

std::vector<std::string> SplitRecord(absl::string_view encoded, int64_t part_bytes) {
  const size_t step = static_cast<size_t>(std::max<int64_t>(1, part_bytes));
  std::vector<std::string> out;
  for (size_t at = 0; at < encoded.size(); at += step) out.emplace_back(encoded.substr(at, step));
  if (out.empty()) out.emplace_back();
  return out;
}

std::string RunPartsPrefix(const std::string& parts_prefix, absl::string_view run_id) {
  return absl::StrCat(parts_prefix, absl::BytesToHexString(run_id), "/");
}

std::string SeqPartsPrefix(const std::string& parts_prefix, absl::string_view run_id, int64_t seq) {
  return absl::StrCat(RunPartsPrefix(parts_prefix, run_id), absl::StrFormat("%016x", static_cast<uint64_t>(seq)), "/");
}

std::string PartKey(const std::string& parts_prefix, absl::string_view run_id, int64_t seq, int64_t index) {
  return absl::StrCat(SeqPartsPrefix(parts_prefix, run_id, seq), absl::StrFormat("%06d", index));
}

namespace {

// `hex` (an even count of hex digits) as bytes; false for anything else.
bool FromHex(absl::string_view hex, std::string* out) {
  if (hex.size() % 2 != 0) return false;
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  *out = absl::HexStringToBytes(hex);
  return true;
}

}  // namespace

bool PartsAssembler::Add(absl::string_view key, std::string value) {
  // <prefix><hex>/<seq16>/<index6>
  if (!absl::ConsumePrefix(&key, prefix_)) return false;
  std::vector<absl::string_view> f = absl::StrSplit(key, '/');
  std::string run_id;
  uint64_t seq = 0;
  int64_t index = 0;
  if (f.size() != 3 || f[1].size() != 16 || f[2].size() != 6 || !FromHex(f[0], &run_id) ||
      !absl::SimpleHexAtoi(f[1], &seq) || !absl::SimpleAtoi(f[2], &index)) {
    return false;
  }
  parts_[{run_id, static_cast<int64_t>(seq)}][index] = std::move(value);
  return true;
}

absl::StatusOr<std::string> PartsAssembler::Take(absl::string_view run_id, const PartsHead& head) {
  auto it = parts_.find({std::string(run_id), head.seq});
  if (it == parts_.end()) {
    return absl::DataLossError(absl::StrCat("none of the ", head.count, " parts of record ", head.seq, " is in etcd"));
  }
  // Left in place on failure: Untaken names them, for dropping.
  const std::map<int64_t, std::string>& parts = it->second;
  std::string out;
  for (int64_t i = 0; i < head.count; ++i) {
    auto part = parts.find(i);
    if (part == parts.end()) {
      return absl::DataLossError(absl::StrCat("part ", i, " of the ", head.count, " parts of record ", head.seq,
                                              " is not in etcd"));
    }
    out += part->second;
  }
  if (static_cast<int64_t>(out.size()) != head.bytes) {
    return absl::DataLossError(absl::StrCat("the parts of record ", head.seq, " hold ", out.size(),
                                            " bytes; its head says ", head.bytes));
  }
  parts_.erase(it);
  return out;
}

std::vector<std::pair<std::string, int64_t>> PartsAssembler::Untaken() const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [id, parts] : parts_) out.push_back(id);
  return out;
}

std::vector<std::vector<Op>> RecordWriteOps(const std::string& record_key, const std::string& parts_prefix,
                                            const RunRecord& record, const std::string& encoded, int64_t part_bytes,
                                            bool had_parts) {
  std::vector<std::vector<Op>> out;
  if (static_cast<int64_t>(encoded.size()) <= part_bytes) {
    out.push_back({Op::Put(record_key, encoded)});
    if (had_parts) out.back().push_back(Op::DeletePrefix(RunPartsPrefix(parts_prefix, record.run_id)));
    return out;
  }
  std::vector<std::string> parts = SplitRecord(encoded, part_bytes);
  for (size_t i = 0; i < parts.size(); ++i) {
    out.push_back({Op::Put(PartKey(parts_prefix, record.run_id, record.seq, static_cast<int64_t>(i)),
                           std::move(parts[i]))});
  }
  const PartsHead head{record.incarnation, record.seq, static_cast<int64_t>(parts.size()),
                       static_cast<int64_t>(encoded.size())};
  Op older = Op::Delete(RunPartsPrefix(parts_prefix, record.run_id));
  older.range_end = SeqPartsPrefix(parts_prefix, record.run_id, record.seq);
  out.push_back({Op::Put(record_key, EncodeHead(head)), std::move(older)});
  return out;
}

std::vector<std::string> AssembleRecords(PartsAssembler* assembler, std::vector<RunRecord>* out,
                                         std::vector<std::pair<size_t, PartsHead>>* heads) {
  std::vector<std::string> errors;
  std::vector<bool> left_out(out->size(), false);
  for (const auto& [i, head] : *heads) {
    RunRecord& named = (*out)[i];
    absl::StatusOr<std::string> encoded = assembler->Take(named.run_id, head);
    absl::StatusOr<RunRecord> rec = encoded.ok() ? DecodeRunRecord(*encoded) : encoded.status();
    if (rec.ok() && (rec->run_id != named.run_id || rec->incarnation != head.incarnation || rec->seq != head.seq)) {
      rec = absl::DataLossError(absl::StrCat("its parts hold run '", rec->run_id.substr(0, 64), "' incarnation ",
                                             rec->incarnation, " seq ", rec->seq));
    }
    if (!rec.ok()) {
      errors.push_back(absl::StrCat("run '", named.run_id.substr(0, 64), "' (a record in ", head.count,
                                    " parts): ", rec.status().message()));
      left_out[i] = true;
      continue;
    }
    named = std::move(*rec);
  }
  std::vector<RunRecord> kept;
  std::vector<std::pair<size_t, PartsHead>> kept_heads;
  size_t h = 0;
  for (size_t i = 0; i < out->size(); ++i) {
    while (h < heads->size() && (*heads)[h].first < i) ++h;
    if (left_out[i]) continue;
    if (h < heads->size() && (*heads)[h].first == i) kept_heads.emplace_back(kept.size(), (*heads)[h].second);
    kept.push_back(std::move((*out)[i]));
  }
  *out = std::move(kept);
  *heads = std::move(kept_heads);
  return errors;
}

}  // namespace meshrun::rendezvous::state::etcd
