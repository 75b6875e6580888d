// The key-value store of one run: keys are scoped by round, waiters park
// here (never a thread) until their keys arrive or their deadline passes.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rendezvous/policy/limits.h"
#include "rendezvous/policy/memory_budget.h"
#include "rendezvous/policy/timer.h"
#include "rendezvous/store/request_records.h"

namespace meshrun::rendezvous {

class KvStore : public std::enable_shared_from_this<KvStore> {
 public:
  using WaiterId = uint64_t;
  // Receives the values of the waited keys, in request order, or an error
  // (DEADLINE_EXCEEDED naming the missing keys, CANCELLED, ABORTED).
  using ValuesCallback = absl::AnyInvocable<void(absl::StatusOr<std::vector<std::string>>)>;

  // `timer` must outlive the store. `label` (the run id) goes into messages.
  // `limits`: max_key_bytes, max_value_bytes, max_keys_per_run,
  // max_store_bytes_per_run, max_waiters_per_run, max_wait and
  // max_store_bytes (the last counted in `server_bytes`, shared by every
  // run's store of a server; a fresh counter when null). `budget`, when
  // given (it must outlive the store), is charged every key (kStoreKeyCost
  // plus its key's and value's bytes) and every parked read
  // (kParkedWaitCost): a write or wait it refuses is RESOURCE_EXHAUSTED
  // naming the budget, and changes nothing.
  KvStore(std::string label, DeadlineTimer* timer, const ServerLimits& limits = ServerLimits(),
          std::shared_ptr<std::atomic<int64_t>> server_bytes = nullptr, MemoryBudget* budget = nullptr);
  ~KvStore();

  // All operations are thread-safe; each costs O(keys + waiters woken).
  // Writes past a limit change nothing: INVALID_ARGUMENT for a key or value
  // longer than allowed, RESOURCE_EXHAUSTED when the run's (or the
  // server's) store is full; both name the limit and the value.
  // Write-once keys (IsWriteOnceKey, common/store.h) never change once set
  // in a round: a write of another value (Set, MultiSet, Add, a CompareSet
  // that would swap) and a Delete are refused FAILED_PRECONDITION naming
  // the key, and change nothing; a write of the same value succeeds.
  //
  // Each has two forms. The one with `done` never waits: it answers
  // through `done`, once (on this thread when it can at once, else on the
  // thread that saves the store's writes: see SetDurability). The one
  // without waits for that answer and returns it.
  using StatusCallback = absl::AnyInvocable<void(absl::Status)>;
  template <typename T>
  using ResultCallback = absl::AnyInvocable<void(absl::StatusOr<T>)>;

  void Set(int64_t round, const std::string& key, std::string value, StatusCallback done);
  absl::Status Set(int64_t round, const std::string& key, std::string value);
  // All or nothing: every key is checked before any is written.
  void MultiSet(int64_t round, const std::vector<std::string>& keys, std::vector<std::string> values,
                StatusCallback done);
  absl::Status MultiSet(int64_t round, const std::vector<std::string>& keys, std::vector<std::string> values);
  // FAILED_PRECONDITION when the stored value is not a decimal integer;
  // INVALID_ARGUMENT when the sum does not fit in 64 bits.
  //
  // Add and CompareSet with a non-empty `request_id` (the proto's
  // KvAddRequest.request_id; request_records.h) take effect once: the write
  // is saved with a record of its answer, and a repeat of the id (in this
  // round) is answered from the record and writes nothing, even on a
  // replica that restored the store from etcd after a failover. An add of 0
  // and a compare-set that does not swap write nothing and leave no record
  // (a repeat does the same read again). INVALID_ARGUMENT for an id longer
  // than RequestRecords::kMaxRequestIdBytes, or one whose record is of
  // another operation or key. Records are charged to the memory budget but
  // not to the run's key and byte limits; they are erased with later
  // recorded writes (no timer) past request_record_ttl, or past
  // max_request_records_per_run once older than
  // RequestRecords::kResendWindow.
  void Add(int64_t round, const std::string& key, int64_t delta, ResultCallback<int64_t> done,
           const std::string& request_id = "");
  absl::StatusOr<int64_t> Add(int64_t round, const std::string& key, int64_t delta,
                              const std::string& request_id = "");
  // Answers (stored value afterwards, swapped).
  void CompareSet(int64_t round, const std::string& key, const std::string& expected, std::string desired,
                  ResultCallback<std::pair<std::string, bool>> done, const std::string& request_id = "");
  absl::StatusOr<std::pair<std::string, bool>> CompareSet(int64_t round, const std::string& key,
                                                          const std::string& expected, std::string desired,
                                                          const std::string& request_id = "");
  void Check(int64_t round, const std::vector<std::string>& keys, ResultCallback<bool> done);
  absl::StatusOr<bool> Check(int64_t round, const std::vector<std::string>& keys);
  // The keys of `round` that start with `prefix` (c10d getNumKeys and
  // listKeys, over one namespace): how many (`count`) and, with max_keys >
  // 0, which, in no order; request records are not listed; RESOURCE_EXHAUSTED naming both numbers when more
  // than max_keys match. One pass over the run's keys, under its lock
  // (at most max_keys_per_run).
  struct KeyList {
    int64_t count = 0;
    std::vector<std::string> keys;
  };
  void Keys(int64_t round, const std::string& prefix, int64_t max_keys, ResultCallback<KeyList> done);
  absl::StatusOr<KeyList> Keys(int64_t round, const std::string& prefix, int64_t max_keys);
  // True when the key existed (and is now gone).
  void Delete(int64_t round, const std::string& key, ResultCallback<bool> done);
  absl::StatusOr<bool> Delete(int64_t round, const std::string& key);

  // Answers `done` with the values of `keys` once all are set: at once (on
  // this thread) when they already are; NOT_FOUND at once when `wait` is zero
  // and a key is missing; else parks a waiter until they are set (on the
  // setter's thread) or `wait` passes (on the timer thread). Returns the
  // waiter's id (0 when answered at once, or once the writes it read are
  // saved) for Cancel. Refused at once
  // (through `done`): a key longer than max_key_bytes or more keys than
  // max_keys_per_run (INVALID_ARGUMENT), `wait` beyond max_wait
  // (INVALID_ARGUMENT), max_waiters_per_run waiters parked already
  // (RESOURCE_EXHAUSTED).
  WaiterId Await(int64_t round, std::vector<std::string> keys, absl::Duration wait,
                 ValuesCallback done);

  // Answers a parked waiter with CANCELLED; no-op when already answered.
  void Cancel(WaiterId id);

  // Answers every parked waiter with ABORTED(`why`) and drops all keys.
  // Every call after it is refused UNAVAILABLE(`why`): a call that found
  // the run before it was closed (a replica that stopped serving and cleared
  // its state, a run removed) never acts on the emptied store, which would
  // answer as if its keys had never been set.
  void Close(const std::string& why);

  // Drops keys and waiters (ABORTED) of rounds below `round`.
  void DropRoundsBelow(int64_t round);

  // From now on this store's charges are a member's (Claimant::kMember: a
  // round of its run closed), which the budget's member reserve serves.
  // Thread-safe.
  void MarkMemberRun() { member_.store(true, std::memory_order_relaxed); }
  // Durable keys (a replicated server: rendezvous/run/journal.h). `write`
  // is called with every write that passed the checks - the keys set with
  // their values, the keys deleted - under the store's lock, before it is
  // applied; it must not wait for I/O. It returns true when the write is
  // saved already, false when it will call `saved` later (on another
  // thread, with none of its locks held) once the write is saved or failed,
  // or an error: the write is refused with it and nothing changes.
  //
  // A write that is not saved yet is applied at once, so that the writes
  // after it (a compare-set, an add) see it, but nothing that saw it is
  // answered before it is saved: its own answer, the parked reads it
  // completes, and every read or write after it wait until every write
  // before them is saved (saves complete in the order `write` was called).
  // A write that fails closes the store (as Close) with UNAVAILABLE naming
  // why: every call waiting on it or after it is answered so, since what
  // the store holds is no longer what was saved.
  //
  // `drop` is told the round below which keys were dropped
  // (DropRoundsBelow). Set both before the store is shared; unset (the
  // default): every write is saved at once.
  using SavedCallback = absl::AnyInvocable<void(absl::Status)>;
  using WriteHook = std::function<absl::StatusOr<bool>(int64_t round,
                                                       const std::vector<std::pair<std::string, std::string>>& set,
                                                       const std::vector<std::string>& erase, SavedCallback saved)>;
  void SetDurability(WriteHook write, std::function<void(int64_t round)> drop) {
    write_hook_ = std::move(write);
    drop_hook_ = std::move(drop);
  }
  // Puts a key back as it was (a replica restoring the store): no checks,
  // no hook, no waiter (none is parked in a fresh store); charged to the
  // memory budget whatever it holds (never refused: etcd holds the key).
  // A request record's key joins the run's records (their bounds counted
  // from now). Thread-safe.
  void Restore(int64_t round, const std::string& key, std::string value);

  // Keys held, request records not included.
  int64_t size() const;
  // Request records held (Add, CompareSet).
  int64_t request_records() const;
  // Bytes held: the sum of every stored key's and value's length. O(1).
  int64_t bytes() const;
  // Reads parked now (waiting for keys). O(1).
  int64_t waiters() const;

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
  // Checks that writing these (key, value size) pairs stays within limits.
  // and charges the memory budget for them (refused: RESOURCE_EXHAUSTED,
  // nothing charged). The run's limits count the clients' keys only, not
  // request records; a request record's key is refused (INVALID_ARGUMENT).
  absl::Status CheckWritesLocked(int64_t round, const std::vector<std::pair<const std::string*, size_t>>& writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The recorded answer of `request_id` in `round` (nullopt: none), or
  // INVALID_ARGUMENT (a bad id, or its record is of another op or key).
  absl::StatusOr<std::optional<std::string>> RecordedLocked(int64_t round, const std::string& request_id,
                                                            RequestRecords::Op op, const std::string& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks, saves and applies the write of `value` to `key` (an add's sum,
  // a compare-set's swap) with the record of `request_id` (none: empty)
  // answering `answer`; erases the records past their bounds. Refused:
  // nothing changes (but records taken past their bounds may be erased).
  absl::Status WriteRecordedLocked(int64_t round, const std::string& key, std::string value,
                                   const std::string& request_id, RequestRecords::Op op,
                                   absl::string_view answer, Fire& fire) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Brings the budget's charge for keys to what the store holds (after
  // keys were erased or values shrank).
  void SyncKeyChargeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Claimant claimant() const { return member_.load(std::memory_order_relaxed) ? Claimant::kMember : Claimant::kOther; }
  // FAILED_PRECONDITION when `key` is write-once and holds a value other
  // than *value (any value, for a delete: `value` null); `op` names the call.
  absl::Status CheckWriteOnceLocked(int64_t round, const std::string& key, const std::string* value,
                                    absl::string_view op) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // UNAVAILABLE(Close's reason) once closed.
  absl::Status ClosedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(absl::flat_hash_map<Key, std::string>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> ValuesLocked(int64_t round, const std::vector<std::string>& keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveWaiterLocked(WaiterId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Expire(WaiterId id);
  void AbortBelow(int64_t round, const std::string& why);
  static void Run(Fire& fire);

  // An answer held until the writes before it are saved: called with OK to
  // give the caller its result, or with the error that replaces it.
  using Answer = absl::AnyInvocable<void(const absl::Status&)>;
  using Ready = std::vector<std::pair<Answer, absl::Status>>;
  // Calls write_hook_ (when set) for one write about to be applied: OK
  // when it may be applied (saved, or to be saved), else why it is refused.
  absl::Status SaveLocked(int64_t round, std::vector<std::pair<std::string, std::string>> set,
                          std::vector<std::string> erase) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `answer` once every write applied so far is saved: into `ready` now,
  // or held until then.
  void AnswerLocked(Answer answer, Ready& ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The write_hook_'s word on the write numbered `seq`.
  void Saved(uint64_t seq, const absl::Status& status);
  // Fails every held answer with `why` (the store is closed).
  void FailHeldLocked(const absl::Status& why, Ready& ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Deliver(Ready& ready);
  // `done` given the result, or the error that replaces it.
  template <typename T>
  static Answer Give(ResultCallback<T> done, T result, Fire fire = {});
  static Answer Give(StatusCallback done, Fire fire);

  WriteHook write_hook_;
  std::function<void(int64_t)> drop_hook_;

  const std::string label_;
  DeadlineTimer* const timer_;
  const ServerLimits limits_;
  const std::shared_ptr<std::atomic<int64_t>> server_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, std::string> data_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, std::vector<WaiterId>> waiting_on_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WaiterId, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  WaiterId next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Of data_ and bytes_, the request records' share.
  int64_t record_keys_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t record_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<std::string> closed_ ABSL_GUARDED_BY(mu_);  // Close's reason.
  // Writes applied (numbered from 1) and saved: every write up to saved_ is.
  uint64_t applied_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t saved_ ABSL_GUARDED_BY(mu_) = 0;
  // Answers held until applied_ as it was then (first) is saved, in order.
  std::deque<std::pair<uint64_t, Answer>> held_ ABSL_GUARDED_BY(mu_);
  MemoryBudget* const budget_;
  std::atomic<bool> member_{false};
  RequestRecords records_ ABSL_GUARDED_BY(mu_){limits_.max_request_records_per_run, limits_.request_record_ttl};
  // What the budget holds for this store's keys (objects, bytes).
  int64_t charged_keys_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t charged_key_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshrun::rendezvous
