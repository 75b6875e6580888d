// The key-value Store interface workers use to exchange bootstrap data
// (NCCL unique ids, Gloo addresses), mirroring c10d::Store's operations.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace meshrun {

// Write-once keys (docs/design.md section 5): every key whose name starts with
// "mesh/", libmesh's namespace (unique ids, Gloo pair addresses, the
// members' descriptions and verdicts). Once such a key holds a value in a
// round, that value never changes: the server refuses any write that would
// change it, or delete it, with FAILED_PRECONDITION naming the key (a write
// of the same value succeeds and changes nothing). That is what lets a
// node's store proxy (agent/store_proxy/store_cache.h) keep these values for the round
// and answer repeated reads itself; every other key is mutable, c10d's
// semantics, and always read from the server. Pure.
inline constexpr absl::string_view kWriteOncePrefix = "mesh/";
bool IsWriteOnceKey(absl::string_view key);

// A key (or any text a client sent) as a message shows it: the whole of it
// up to 64 bytes, else its first 64 bytes and its length. Pure.
std::string Shown(absl::string_view text);

// A key-value store shared by the workers of one run and round.
//
// Values are arbitrary bytes. Timeouts are absl::Duration; waiting
// operations return DEADLINE_EXCEEDED naming the missing key(s) when the
// timeout passes, and UNAVAILABLE when the server cannot be reached.
// Implementations are thread-safe: one Store may be used from many threads.
class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, waking every waiter on `key` (c10d set).
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // Returns the value of `key`, waiting up to `timeout` for it to be set
  // (c10d get). `timeout` == 0: answers at once, NOT_FOUND when absent.
  virtual absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) = 0;

  // Adds `delta` to the integer counter at `key` (absent counts as 0) and
  // returns the new value (c10d add). FAILED_PRECONDITION when the key holds
  // a non-integer value.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;

  // Sets `key` to `desired` if its value equals `expected` (or if it is
  // absent and `expected` is empty). Returns the value stored afterwards
  // (with an absent key and a non-empty `expected`: `expected`, as c10d
  // answers) and whether this call stored it. `value == desired` does not
  // tell that: another client may have stored the same value first, so a
  // read-modify-write loop (TCPStore's APPEND) must look at `swapped`.
  struct CompareSetResult {
    std::string value;
    bool swapped = false;
  };
  virtual absl::StatusOr<CompareSetResult> CompareSwap(absl::string_view key, absl::string_view expected,
                                                       absl::string_view desired) = 0;
  // CompareSwap's value alone (c10d compareSet).
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) {
    absl::StatusOr<CompareSetResult> r = CompareSwap(key, expected, desired);
    if (!r.ok()) return r.status();
    return std::move(r->value);
  }

  // Waits up to `timeout` until every key in `keys` is set (c10d wait).
  virtual absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) = 0;

  // True when every key in `keys` is set, without waiting (c10d check).
  virtual absl::StatusOr<bool> Check(absl::Span<const std::string> keys) = 0;

  // Deletes `key`; true when it existed (c10d deleteKey).
  virtual absl::StatusOr<bool> Delete(absl::string_view key) = 0;

  // The keys that start with `prefix` (every key: ""): how many
  // (`count`) and, with max_keys > 0, which, in no order (c10d getNumKeys
  // and listKeys, over one namespace of the store). RESOURCE_EXHAUSTED
  // naming both numbers when more than max_keys match; INVALID_ARGUMENT
  // for a negative max_keys.
  struct KeyList {
    int64_t count = 0;
    std::vector<std::string> keys;
  };
  virtual absl::StatusOr<KeyList> Keys(absl::string_view prefix, int64_t max_keys) = 0;

  // Returns the values of `keys` in order, waiting up to `timeout` for all
  // of them (c10d multiGet).
  virtual absl::StatusOr<std::vector<std::string>> MultiGet(absl::Span<const std::string> keys,
                                                            absl::Duration timeout) = 0;

  // Sets every keys[i] to values[i] atomically (c10d multiSet).
  // INVALID_ARGUMENT when the sizes differ.
  virtual absl::Status MultiSet(absl::Span<const std::string> keys,
                                absl::Span<const std::string> values) = 0;

  // Sets every set_keys[i] to set_values[i] atomically, then returns the
  // values of `keys` in order, waiting up to `timeout` for all of them: the
  // MultiSet and MultiGet above in one call (meshrun's addition; c10d has
  // none). The gRPC store makes it one round trip; this default makes two.
  // INVALID_ARGUMENT when the set sizes differ.
  virtual absl::StatusOr<std::vector<std::string>> SetThenMultiGet(absl::Span<const std::string> set_keys,
                                                                   absl::Span<const std::string> set_values,
                                                                   absl::Span<const std::string> keys,
                                                                   absl::Duration timeout) {
    if (absl::Status s = MultiSet(set_keys, set_values); !s.ok()) return s;
    return MultiGet(keys, timeout);
  }
};

// A Store that prepends `prefix` + "/" to every key of an underlying store
// (c10d PrefixStore). Shares ownership of the base. Thread-safe when the
// base is.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<CompareSetResult> CompareSwap(absl::string_view key, absl::string_view expected,
                                               absl::string_view desired) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override;
  absl::StatusOr<bool> Delete(absl::string_view key) override;
  // The base's keys under this store's prefix and `prefix`, this store's
  // prefix taken off each.
  absl::StatusOr<KeyList> Keys(absl::string_view prefix, int64_t max_keys) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(absl::Span<const std::string> keys,
                                                    absl::Duration timeout) override;
  absl::Status MultiSet(absl::Span<const std::string> keys,
                        absl::Span<const std::string> values) override;
  absl::StatusOr<std::vector<std::string>> SetThenMultiGet(absl::Span<const std::string> set_keys,
                                                           absl::Span<const std::string> set_values,
                                                           absl::Span<const std::string> keys,
                                                           absl::Duration timeout) override;

  const std::string& prefix() const { return prefix_; }

 private:
  std::string Full(absl::string_view key) const;
  std::vector<std::string> FullAll(absl::Span<const std::string> keys) const;

  const std::string prefix_;
  const std::shared_ptr<Store> base_;
};

}  // namespace meshrun
