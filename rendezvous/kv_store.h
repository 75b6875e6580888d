// The key-value store of one run: keys are scoped by round, waiters park
// here (never a thread) until their keys arrive or their deadline passes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rendezvous/timer.h"

namespace meshrun::rendezvous {

class KvStore : public std::enable_shared_from_this<KvStore> {
 public:
  using WaiterId = uint64_t;
  // Receives the values of the waited keys, in request order, or an error
  // (DEADLINE_EXCEEDED naming the missing keys, CANCELLED, ABORTED).
  using ValuesCallback = absl::AnyInvocable<void(absl::StatusOr<std::vector<std::string>>)>;

  // `timer` must outlive the store. `label` (the run id) goes into messages.
  KvStore(std::string label, DeadlineTimer* timer);

  // All operations are thread-safe; each costs O(keys + waiters woken).
  void Set(int64_t round, const std::string& key, std::string value);
  absl::Status MultiSet(int64_t round, const std::vector<std::string>& keys,
                        std::vector<std::string> values);
  // FAILED_PRECONDITION when the stored value is not a decimal integer.
  absl::StatusOr<int64_t> Add(int64_t round, const std::string& key, int64_t delta);
  // Returns (stored value afterwards, swapped).
  std::pair<std::string, bool> CompareSet(int64_t round, const std::string& key,
                                          const std::string& expected, std::string desired);
  bool Check(int64_t round, const std::vector<std::string>& keys);
  bool Delete(int64_t round, const std::string& key);

  // Answers `done` with the values of `keys` once all are set: at once (on
  // this thread) when they already are; NOT_FOUND at once when `wait` is zero
  // and a key is missing; else parks a waiter until they are set (on the
  // setter's thread) or `wait` passes (on the timer thread). Returns the
  // waiter's id (0 when answered at once) for Cancel.
  WaiterId Await(int64_t round, std::vector<std::string> keys, absl::Duration wait,
                 ValuesCallback done);

  // Answers a parked waiter with CANCELLED; no-op when already answered.
  void Cancel(WaiterId id);

  // Answers every parked waiter with ABORTED(`why`) and drops all keys.
  void Close(const std::string& why);

  // Drops keys and waiters (ABORTED) of rounds below `round`.
  void DropRoundsBelow(int64_t round);

  int64_t size() const;
  // Bytes held: the sum of every stored key's and value's length. O(keys).
  int64_t bytes() const;

 private:
  struct Key {
    int64_t round;
    std::string key;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) { return H::combine(std::move(h), k.round, k.key); }
    bool operator==(const Key& o) const { return round == o.round && key == o.key; }
  };
  struct Waiter {
    int64_t round;
    std::vector<std::string> keys;
    size_t missing;
    DeadlineTimer::Id timer_id;
    ValuesCallback done;
  };
  using Fire = std::vector<std::pair<ValuesCallback, absl::StatusOr<std::vector<std::string>>>>;

  void SetLocked(int64_t round, const std::string& key, std::string value, Fire& fire)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> ValuesLocked(int64_t round, const std::vector<std::string>& keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveWaiterLocked(WaiterId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Expire(WaiterId id);
  void AbortBelow(int64_t round, const std::string& why);
  static void Run(Fire& fire);

  const std::string label_;
  DeadlineTimer* const timer_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, std::string> data_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, std::vector<WaiterId>> waiting_on_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WaiterId, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  WaiterId next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace meshrun::rendezvous
