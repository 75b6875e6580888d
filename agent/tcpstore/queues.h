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
// the tail in one atomic MultiSet. Head and tail change only under this
// object's mutex: a queue is atomic among the clients of one agent store
// (all of a job's workers use node rank 0's, MASTER_ADDR:MASTER_PORT), not
// between two agent stores serving one round. Thread-safe.
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

  // For each of `keys`, whether the queue of that name holds an item now.
  // Asks the store only for names pushed to since SetStore: a WAIT or CHECK
  // that involves no queue costs no store call here.
  absl::StatusOr<std::vector<bool>> Holding(absl::Span<const std::string> keys);

  // True when some of `keys` (AllQueues: each of them) names a queue
  // pushed to since SetStore.
  bool AnyQueue(absl::Span<const std::string> keys);
  bool AllQueues(absl::Span<const std::string> keys);

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
  struct Waiter {
    int64_t id;
    std::shared_ptr<std::function<bool()>> release;
  };
  // The integer value of `key` (absent: 0); INTERNAL for any other text.
  static absl::StatusOr<int64_t> Counter(Store& store, const std::string& key);
  // Head and tail of queue `name`.
  absl::StatusOr<std::pair<int64_t, int64_t>> Ends(Store& store, const std::string& name);
  void ReleaseOne(const std::string& name);

  // Serialises every change of a head or tail (and so of a queue).
  absl::Mutex ops_mu_;
  mutable absl::Mutex mu_;
  std::shared_ptr<Store> store_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> pushed_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::list<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
  int64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 0;
  size_t waiter_count_ ABSL_GUARDED_BY(mu_) = 0;
};

// The store keys of queue `name`: its head, its tail and its item `i`.
std::string QueueHeadKey(const std::string& name);
std::string QueueTailKey(const std::string& name);
std::string QueueItemKey(const std::string& name, int64_t i);

}  // namespace meshrun::agent::tcpstore
