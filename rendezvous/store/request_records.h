// Request records of one run's store: what makes a KvAdd or KvCompareSet
// sent with a request_id take effect once, however often it is sent (a
// node's store proxy sends it again to the next leader when the one it was
// sent to died before answering: agent/store_proxy/forwarded_call.h).
//
// A record is a key of the run's store, written with the write it records
// (in the same save, so a replicated server's etcd holds both or neither),
// named by the request id under a prefix no client can send (kPrefix: the
// byte 0xFF, which never occurs in UTF-8, and the protocol's keys are UTF-8
// strings); its value is the operation, the time of the write, the key and
// the answer (an add's sum; nothing for a compare-set, which is recorded
// only when it swapped: its answer is the value the repeat carries). A
// replica that restores the store from etcd restores the records with it,
// so the next leader answers a repeat as the first one would have been.
//
// This class keeps the records' order, oldest write first, for their
// bounds: none older than request_record_ttl, and the newest
// max_request_records_per_run, except that the count never erases one
// younger than kResendWindow (a repeat may still be on its way: the bound
// is exceeded instead). At most kMaxErasedPerWrite are erased with one
// write. The store (kv_store.h) holds the records themselves. Not
// thread-safe: the store's lock guards it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace meshrun::rendezvous {

class RequestRecords {
 public:
  // Longest request id, bytes (the proto's KvAddRequest.request_id).
  static constexpr int64_t kMaxRequestIdBytes = 128;
  // The store key prefix of every record.
  static constexpr absl::string_view kPrefix = "\xff" "request/";
  // The youngest record the count bound erases: above the time a repeat
  // takes to reach the next leader (its agent's leader_grace, 60 s by
  // default, within its worker's deadline).
  static constexpr absl::Duration kResendWindow = absl::Minutes(2);
  // Records erased with one write at most (their deletes ride in its etcd
  // transaction, which must stay small).
  static constexpr int64_t kMaxErasedPerWrite = 32;

  // The operations recorded.
  enum class Op : char { kAdd = 'a', kCompareSet = 'c' };

  // INVALID_ARGUMENT naming the id and the bound when it is longer than
  // kMaxRequestIdBytes. Pure.
  static absl::Status CheckRequestId(absl::string_view request_id);
  // The store key of `request_id`'s record. Pure.
  static std::string KeyOf(absl::string_view request_id);
  // True for a record's store key (kPrefix). Pure.
  static bool IsRecordKey(absl::string_view key);
  // The record's value: `op` on `key`, written at `at`, answered `answer`. Pure.
  static std::string Encode(Op op, absl::Time at, absl::string_view key, absl::string_view answer);
  // When a record's value says it was written (nullopt: not a record's value). Pure.
  static std::optional<absl::Time> WrittenAt(absl::string_view stored);
  // The answer a repeat of `request_id` (`op` on `key`) gets from `stored`,
  // the record's value (nullopt: none, the request is new).
  // INVALID_ARGUMENT naming the id when the record is of another operation
  // or key. Pure.
  static absl::StatusOr<std::optional<std::string>> AnswerOf(const std::string* stored, absl::string_view request_id,
                                                             Op op, absl::string_view key);

  // max_records >= 1 of them kept, each at most `ttl`.
  RequestRecords(int64_t max_records, absl::Duration ttl) : max_records_(max_records), ttl_(ttl) {}

  // A record (its round and store key), written at `at`.
  struct Entry {
    absl::Time at;
    int64_t round = 0;
    std::string key;
  };
  // A record written now: the newest.
  void Added(int64_t round, std::string key, absl::Time at);
  // A record restored from a save, written at `at` (in any order: sorted
  // before the next eviction).
  void Restored(int64_t round, std::string key, absl::Time at);
  // The records to erase so that `more` new ones fit at `now` (past the
  // ttl, or past the count and older than kResendWindow), oldest first, at
  // most kMaxErasedPerWrite, taken out of the order. Some may be gone from
  // the store already (their round was dropped).
  std::vector<Entry> TakeEvicted(absl::Time now, int64_t more);
  // Entries TakeEvicted returned whose erasure did not happen (a refused
  // save), back at the front in their order.
  void PutBack(std::vector<Entry> entries);
  // Forgets the records of rounds below `round` (the store dropped them).
  void DropBelow(int64_t round);
  // Forgets every record (the store was closed).
  void Clear();
  int64_t size() const { return static_cast<int64_t>(order_.size()); }
  // Bytes the order holds (entries and their keys), for the memory budget.
  int64_t bytes() const { return bytes_; }

 private:
  static int64_t Cost(const Entry& e) { return static_cast<int64_t>(sizeof(Entry) + e.key.size()); }

  const int64_t max_records_;
  const absl::Duration ttl_;
  std::deque<Entry> order_;  // Oldest write first (once sorted).
  bool unsorted_ = false;    // Restored entries since the last sort.
  int64_t bytes_ = 0;
};

}  // namespace meshrun::rendezvous
