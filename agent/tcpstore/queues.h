// c10d's TCPStore queues (QUEUE_PUSH, QUEUE_POP, QUEUE_LEN, and a queue's
// part in CHECK and WAIT) kept in meshrun's store, and the WAITs a push
// releases. Pure domain: no sockets (tcpstore_server.h serves them).
//
// As PyTorch's own server (checked against PyTorch 2.15's, from its client):
//  - queues are a namespace of their own: queue "q" and key "q" are apart;
//    GET, DELETE_KEY, GETNUMKEYS and LIST_KEYS never see a queue;
//  - CHECK and WAIT take a key as ready when it is set or when the queue of
//    that name holds an item (a blocking queue_pop is a WAIT, then a pop);
//  - a push releases one WAIT on its queue's name (the oldest), so that
//    many blocking pops each wait for an item of their own;
//  - QUEUE_POP answers the queue's length before the pop, then the item;
//    0 alone when the queue is empty (the client raises QueueEmptyError).
//
// Where they live: queue Q's items are the keys "queue/Q/item/<i>" of the
// store given (the agent store's internal namespace, which no client
// reaches), i from the value of "queue/Q/head" (the next to pop; absent: 0)
// up to that of "queue/Q/tail" (the next to push), so they follow the
// replicas and count against the store's limits. A push writes its item and
// the tail in one atomic MultiSet. Head and tail change only here, under the
// queue's lock (one of kLockStripes, by the name's hash), and are cached
// once read: a queue is atomic among the clients of one agent store (all of
// a job's workers use node rank 0's, MASTER_ADDR:MASTER_PORT), not between
// two agent stores serving one round. A queue's name, with the 26 bytes of
// "torch-internal/queue/" and "/tail" around it, must fit in the server's
// max_key_bytes. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/store.h"

namespace meshrun::agent::tcpstore {

class Queues {
 public:
  // The store the queues live in from now on (the round's internal store;
  // nullptr: none yet). The names pushed to before are forgotten, as the
  // round's keys are.
  void SetStore(std::shared_ptr<Store> store);

  // Appends `value` to queue `name`, then releases the oldest WAIT on `name`
  // that a release answers (AddWaiter). FAILED_PRECONDITION when no store is
  // set; the store's errors (RESOURCE_EXHAUSTED at its limits), nothing
  // pushed then.
  absl::Status Push(const std::string& name, const std::string& value);

  // Removes the oldest item of queue `name`: the queue's length before the
  // pop and the item; {0, nullopt} when it is empty or was never pushed to.
  // DATA_LOSS when an item between head and tail is missing from the store;
  // the store's errors, nothing popped then. (Should the item's delete fail
  // after the head moved, the item is answered all the same and its key
  // stays until the round's keys are dropped.)
  absl::StatusOr<std::pair<int64_t, std::optional<std::string>>> Pop(const std::string& name);

  // Items in queue `name` (0 for one never pushed to). The store's errors.
  absl::StatusOr<int64_t> Length(const std::string& name);

  // The keys of `keys` whose queue holds no item now, in order: what CHECK
  // and WAIT still need set as keys. Asks the store only for names pushed
  // to since SetStore: a WAIT or CHECK that involves no queue costs no
  // store call here.
  absl::StatusOr<std::vector<std::string>> NotHolding(absl::Span<const std::string> keys);

  // True when some of `keys` (AllQueues: each of them) names a queue
  // pushed to since SetStore.
  bool AnyQueue(absl::Span<const std::string> keys);
  bool AllQueues(absl::Span<const std::string> keys);

  // Releases every registered WAIT on each of `keys` that names a queue
  // pushed to since SetStore, after a client's write made that key present
  // (SET, MULTI_SET, ADD, APPEND): such a WAIT may be waiting here for a
  // push only. Costs nothing for other keys.
  void KeysSet(absl::Span<const std::string> keys);

  // Registers a WAIT on the single key `key`: a push to queue `key` calls
  // `release` (on the pusher's thread, with none of this object's locks
  // held), oldest waiter first, until one returns true (it answered its
  // WAIT, and leaves the registry; false: that WAIT was answered or
  // canceled already, or cannot be answered without waiting, and stays
  // until RemoveWaiter). Returns the id RemoveWaiter takes. A WAIT on several keys does not register: it looks at its
  // queues again each time its slice of waiting ends (tcpstore_server.h).
  int64_t AddWaiter(const std::string& key, std::function<bool()> release);
  void RemoveWaiter(const std::string& key, int64_t id);
  // Registered waiters now (tests).
  size_t waiters() const;

 private:
  static constexpr size_t kLockStripes = 64;
  struct Waiter {
    int64_t id;
    std::shared_ptr<std::function<bool()>> release;
  };
  struct Ends {
    int64_t head = 0;
    int64_t tail = 0;
  };
  // The integer value of `key` (absent: 0); INTERNAL for any other text.
  static absl::StatusOr<int64_t> Counter(Store& store, const std::string& key);
  // The store and queue `name`'s head and tail (cached, else read); the
  // caller holds LockOf(name).
  absl::StatusOr<std::pair<std::shared_ptr<Store>, Ends>> Open(const std::string& name);
  // Forgets queue `name`'s cached ends (after a store error: read again).
  void Forget(const std::string& name);
  absl::Mutex& LockOf(const std::string& name);
  // Calls the releases of `name`'s waiters, oldest first, until one answers
  // (`all`: every one); those that answered leave the registry.
  void Release(const std::string& name, bool all);

  // A queue's lock: serialises the changes of its head and tail.
  absl::Mutex stripes_[kLockStripes];
  mutable absl::Mutex mu_;
  std::shared_ptr<Store> store_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> pushed_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Ends> ends_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::list<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
  int64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 0;
  size_t waiter_count_ ABSL_GUARDED_BY(mu_) = 0;
};

// The store keys of queue `name`: its head, its tail and its item `i`.
std::string QueueHeadKey(const std::string& name);
std::string QueueTailKey(const std::string& name);
std::string QueueItemKey(const std::string& name, int64_t i);

}  // namespace meshrun::agent::tcpstore
