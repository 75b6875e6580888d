// Request records of one run's store: what makes a KvAdd or KvCompareSet
// sent with a request_id take effect once, however often it is sent (a
// node's store proxy sends it again to the next leader when the one it was
// sent to died before answering: agent/store_proxy/forwarded_call.h).
//
// A record is a key of the run's store, written with the write it records
// (in the same save, so a replicated server's etcd holds both or neither),
// named by the request id under a prefix no client can send (kPrefix: the
// byte 0xFF, which never occurs in UTF-8, and the protocol's keys are UTF-8
// strings); its value is the operation, the key and the answer. A replica
// that restores the store from etcd restores the records with it, so the
// next leader answers a repeat as the first one would have been answered.
//
// This class only keeps the records' order for their bounds: the newest
// max_request_records_per_run, none older than request_record_ttl (counted
// from the write, or from the restore on a replica that loaded it). The
// store (kv_store.h) holds the records themselves. Not thread-safe: the
// store's lock guards it.
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

  // The operations recorded.
  enum class Op : char { kAdd = 'a', kCompareSet = 'c' };

  // INVALID_ARGUMENT naming the id and the bound when it is longer than
  // kMaxRequestIdBytes. Pure.
  static absl::Status CheckRequestId(absl::string_view request_id);
  // The store key of `request_id`'s record. Pure.
  static std::string KeyOf(absl::string_view request_id);
  // True for a record's store key (kPrefix). Pure.
  static bool IsRecordKey(absl::string_view key);
  // The record's value: `op` on `key` answered `answer`. Pure.
  static std::string Encode(Op op, absl::string_view key, absl::string_view answer);
  // The answer a repeat of `request_id` (`op` on `key`) gets from `stored`,
  // the record's value (nullopt: none, the request is new).
  // INVALID_ARGUMENT naming the id when the record is of another operation
  // or key. Pure.
  static absl::StatusOr<std::optional<std::string>> AnswerOf(const std::string* stored, absl::string_view request_id,
                                                             Op op, absl::string_view key);

  // max_records >= 1 of them kept, each at most `ttl`.
  RequestRecords(int64_t max_records, absl::Duration ttl) : max_records_(max_records), ttl_(ttl) {}

  // A record (its round and store key) written or restored at `now`.
  struct Entry {
    absl::Time at;
    int64_t round = 0;
    std::string key;
  };
  void Added(int64_t round, std::string key, absl::Time now);
  // The records to erase so that `more` new ones fit at `now`: past the
  // count, or older than the ttl; oldest first, taken out of the order.
  // Some may be gone from the store already (their round was dropped).
  std::vector<Entry> TakeEvicted(absl::Time now, int64_t more);
  // Entries TakeEvicted returned whose erasure did not happen (a refused
  // save), back at the front in their order.
  void PutBack(std::vector<Entry> entries);
  // Forgets every record (the store was closed).
  void Clear() { order_.clear(); }
  int64_t size() const { return static_cast<int64_t>(order_.size()); }

 private:
  const int64_t max_records_;
  const absl::Duration ttl_;
  std::deque<Entry> order_;  // Oldest first.
};

}  // namespace meshrun::rendezvous
