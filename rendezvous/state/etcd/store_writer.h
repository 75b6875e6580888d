// Group commit of a replica's store writes (docs/etcd.md, "Group commit").
// Callers never wait for etcd: each write of every run's store is queued, in
// the order the stores applied them, and one thread of the writer's own puts
// as many queued writes as fit into one fenced etcd transaction, then tells
// each caller its outcome. A transaction takes about one etcd round trip
// (its fsync) whatever it carries, so N concurrent writes cost a few round
// trips instead of N.
//
// Order and failure. Writes reach etcd in the order they were submitted, in
// transactions applied one at a time. A transaction that fails (or whose
// outcome is unknown) fails every write queued after it as well, and the
// writer refuses new writes until Reset: later writes were computed from
// state that includes the failed ones, and etcd must never hold them
// without it. The replica then loads its state again (Replica::Reload).
//
// Thread-safe. `done` callbacks run on the writer's thread (or Stop's
// caller's), with none of the writer's locks held; they must not block on
// etcd nor call Stop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rendezvous/state/etcd/client/etcd_types.h"

namespace meshrun::rendezvous::state::etcd {

class Election;

struct StoreWriterOptions {
  // Most writes queued and not yet in a transaction; a write past it is
  // refused RESOURCE_EXHAUSTED naming this bound (nothing is written). Each
  // queued write's keys and values are already charged to the server's
  // memory budget by the store that applied it.
  int64_t max_queued_writes = 100000;
  // A transaction carries queued writes up to about this many bytes (keys
  // and values). Keep it well under etcd's --max-request-bytes (1.5 MiB by
  // default). A single bigger write goes alone.
  int64_t max_batch_bytes = 512 << 10;
  // Most single-key operations in one transaction (nested as etcd's
  // --max-txn-ops requires). A single bigger write goes alone.
  size_t max_batch_ops = 2048;
};

class StoreWriter {
 public:
  // One write: operations applied together, at one revision. Either
  // single-key puts and deletes (batched with other writes; a key written
  // twice in one transaction keeps its last operation), or operations
  // over a range of keys (a transaction of their own), or none (answered
  // once every write before it is).
  struct Write {
    std::vector<Op> ops;
    // The outcome: OK once etcd applied it; else why not (its outcome may be
    // unknown). Called once, on the writer's thread.
    absl::AnyInvocable<void(absl::Status)> done;
  };

  // `election` must outlive the writer: every transaction is its FencedTxn
  // (a replica that no longer leads writes nothing).
  StoreWriter(Election* election, StoreWriterOptions options = {});
  // Fails the queued writes UNAVAILABLE and stops the thread (after the
  // transaction in flight, bounded by the client's timeouts).
  ~StoreWriter();

  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  // Queues `write`; OK means `done` will be called. Refused, with `done`
  // never called and nothing written: RESOURCE_EXHAUSTED when
  // max_queued_writes are queued; UNAVAILABLE after a failed transaction or
  // Stop, until Reset (naming why).
  absl::Status Submit(Write write);

  // Refuses new writes with UNAVAILABLE(`why`), fails the queued ones with
  // it, and returns once no transaction is in flight: what etcd holds then
  // changes no more through this writer, and every accepted write has been
  // answered. Before a load of the state.
  void Stop(const absl::Status& why);
  // Accepts writes again (after a load of the state).
  void Reset();

  // Transactions committed, and the writes they carried; and, now, the writes
  // waiting in the queue and those in the transaction in flight.
  struct Stats {
    int64_t transactions = 0;
    int64_t writes = 0;
    int64_t queued = 0;
    int64_t in_flight = 0;
  };
  Stats stats() const;

  // `ops` as one transaction's list of at most `max` operations: as they are
  // when they fit, else in nested transactions each packed the same way
  // (etcd gives a nested list what its parents' lists leave). INVALID_ARGUMENT
  // when even nesting cannot hold them. Pure.
  static absl::StatusOr<std::vector<Op>> Pack(std::vector<Op> ops, size_t max, int depth = 0);
  // The operations one fenced transaction's list may hold: etcd's 128 less
  // what FencedTxn puts above and beside it.
  static constexpr size_t kFencedOps = 124;

 private:
  struct Queued {
    Write write;
    int64_t bytes = 0;
    bool alone = false;  // Range operations: a transaction of its own.
  };
  void Loop();
  // The next transaction's writes, taken from the queue's front.
  std::vector<Queued> TakeBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One transaction for `batch`'s writes (keys written twice keep their last op).
  static absl::StatusOr<Txn> BuildTxn(std::vector<Queued>& batch);

  Election* const election_;
  const StoreWriterOptions options_;
  mutable absl::Mutex mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status refused_ ABSL_GUARDED_BY(mu_);  // Not OK: Submit refuses with it.
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  int64_t in_flight_writes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace meshrun::rendezvous::state::etcd
