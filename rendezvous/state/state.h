// Implementations of the run's journal port (rendezvous/run/journal.h, which
// says what is durable): MemoryJournal, for tests of the restore, and the
// records' JSON encoding the etcd journal (etcd/etcd_journal.h) keeps. Pure
// domain: no gRPC, no etcd.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rendezvous/run/journal.h"

namespace meshrun::rendezvous::state {

// A journal in memory: what a failover would find, for tests. Thread-safe.
class MemoryJournal : public RunJournal {
 public:
  absl::Status Save(const RunRecord& record) override;
  absl::Status Drop(const std::string& run_id, int64_t incarnation) override;
  absl::Status SaveKeys(const std::string& run_id, int64_t incarnation, int64_t round,
                        const std::vector<std::pair<std::string, std::string>>& set,
                        const std::vector<std::string>& erase) override;
  absl::Status DropKeysBelow(const std::string& run_id, int64_t incarnation, int64_t round) override;
  absl::StatusOr<std::vector<RunRecord>> Load() override;
  // Saves that wrote (not skipped as older).
  int64_t writes() const;
  // Fails on command, for tests of what a failed save does: from now on
  // every write (Save, SaveKeys, DropKeysBelow, Drop) answers `why`;
  // with `applied`, each is applied first (a write whose outcome its caller
  // cannot know, as etcd's when a Txn times out), else nothing is written.
  // FailWrites(absl::OkStatus()) ends it.
  void FailWrites(absl::Status why, bool applied = false);
  // Keys held, of every run and incarnation.
  int64_t keys() const;

 private:
  using KeyMap = std::map<std::pair<int64_t, std::string>, std::string>;  // (round, key) -> value.
  mutable absl::Mutex mu_;
  std::map<std::string, RunRecord> runs_ ABSL_GUARDED_BY(mu_);
  // By (run id, incarnation).
  std::map<std::pair<std::string, int64_t>, KeyMap> keys_ ABSL_GUARDED_BY(mu_);
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fail_ ABSL_GUARDED_BY(mu_);  // FailWrites.
  bool fail_applied_ ABSL_GUARDED_BY(mu_) = false;
};

// A record as JSON text (one object; durations in milliseconds, times in
// Unix nanoseconds), and back: INVALID_ARGUMENT naming the first field
// that is missing or of the wrong type. Pure.
std::string EncodeRunRecord(const RunRecord& record);
absl::StatusOr<RunRecord> DecodeRunRecord(const std::string& json);

}  // namespace meshrun::rendezvous::state
