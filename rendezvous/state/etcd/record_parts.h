// A run record too big for one etcd request (etcd's --max-request-bytes,
// 1.5 MiB by default: a run of 10,000 nodes encodes to about 5 MiB), kept in
// parts. The parts go first, each in a write of its own, under
// "<parts prefix><run id in hex>/<seq, 16 hex digits>/<part, 6 digits>";
// then the record's key takes a head naming them ("parts <incarnation> <seq>
// <count> <bytes>"), in one transaction with the deletion of the run's older
// parts. So a reader sees the old record or the new one, never a mix: parts
// without a head naming them (a leader lost between the parts and the head)
// belong to no record, and the next load drops them. Pure: no etcd calls.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rendezvous/run/journal.h"
#include "rendezvous/state/etcd/client/etcd_types.h"

namespace meshrun::rendezvous::state::etcd {

// What a record's key holds when its record is in parts.
struct PartsHead {
  int64_t incarnation = 0;
  int64_t seq = 0;    // The record's seq: its parts' generation.
  int64_t count = 0;  // Parts, numbered 0..count-1.
  int64_t bytes = 0;  // The encoded record's size: the parts' sum.
};

// The head as its key's value, and back (nullopt for anything else: a
// record's JSON starts with '{').
std::string EncodeHead(const PartsHead& head);
std::optional<PartsHead> DecodeHead(absl::string_view value);

// `encoded` cut into parts of at most `part_bytes` (>= 1) bytes, in order.
std::vector<std::string> SplitRecord(absl::string_view encoded, int64_t part_bytes);

// Key names under `parts_prefix` (which ends with '/'): every part of run
// `run_id`; those of its record `seq`; part `index` of it.
std::string RunPartsPrefix(const std::string& parts_prefix, absl::string_view run_id);
std::string SeqPartsPrefix(const std::string& parts_prefix, absl::string_view run_id, int64_t seq);
std::string PartKey(const std::string& parts_prefix, absl::string_view run_id, int64_t seq, int64_t index);

// Collects parts read back (a load, in any order) and puts records together
// from their heads. Not thread-safe.
class PartsAssembler {
 public:
  explicit PartsAssembler(std::string parts_prefix) : prefix_(std::move(parts_prefix)) {}
  // One key under the parts prefix and its value. A key of another shape is
  // ignored (false).
  bool Add(absl::string_view key, std::string value);
  // The encoded record that `head` names for run `run_id`: its parts in
  // order, joined; DATA_LOSS naming the first part missing, or the size when
  // it differs from the head's. The parts are given away once joined (on
  // failure they stay, and Untaken names them).
  absl::StatusOr<std::string> Take(absl::string_view run_id, const PartsHead& head);
  // The (run id, seq) of every part not taken: no head names them.
  std::vector<std::pair<std::string, int64_t>> Untaken() const;

 private:
  std::string prefix_;
  // (run id, seq) -> part index -> bytes.
  std::map<std::pair<std::string, int64_t>, std::map<int64_t, std::string>> parts_;
};

// The etcd writes that save `record`, whose encoding is `encoded`, under
// `record_key`, each write's operations in order. A record of at most
// `part_bytes` (>= 1) bytes: one write, its put (with the deletion of the
// run's parts when `had_parts`: its record was in parts before). A bigger
// one: a put per part, then the head's put with the deletion of the run's
// parts of lower seqs (seqs only grow).
std::vector<std::vector<Op>> RecordWriteOps(const std::string& record_key, const std::string& parts_prefix,
                                            const RunRecord& record, const std::string& encoded, int64_t part_bytes,
                                            bool had_parts);

// Puts together, in place, the records in parts of `out` (`heads`: index in
// `out` and head; those entries hold only their run id and incarnation):
// each is decoded from its parts in `assembler`. One that cannot be (a part
// missing, an undecodable record, or one of another run, incarnation or
// seq) is removed from `out`, and `heads` then indexes the rest. Returns
// one line per record removed, naming its key's run and why.
std::vector<std::string> AssembleRecords(PartsAssembler* assembler, std::vector<RunRecord>* out,
                                         std::vector<std::pair<size_t, PartsHead>>* heads);

}  // namespace meshrun::rendezvous::state::etcd
