// How a node's store proxy sends its requests to the server
// (docs/design.md section 1 item 6): the requests its workers make at about the
// same time go as one server call. No gRPC here: the call itself is a
// BatchUpstream's (store_upstream.h, the KvBatch method of
// rendezvous.proto).
//
// Two rules decide what goes together:
//  - Nagle's, with the server's acceptance as the acknowledgement: a
//    request goes out at once when no batch is waiting to be accepted;
//    requests that come while one is are held and go together, as one
//    call, the moment it is accepted (the server has applied its sets: one
//    round trip, not the batch's waits). A lone request never waits.
//  - Publications wait for the node's other workers: a request that
//    publishes write-once keys (sets under "mesh/": libmesh's unique ids,
//    descriptions, Gloo addresses) is held until `expected_publishers`
//    publications are held (the node's workers, --nproc_per_node) or
//    `publication_hold` has passed since the first, whichever comes first.
//    libmesh's bootstraps are collective: no member can finish before the
//    node's last worker has published, so holding the earlier ones costs
//    nothing when every local worker takes part, and at most
//    `publication_hold` when only some do. The node's exchange then costs
//    one server call however far apart its workers arrive (processes start
//    tens of milliseconds apart; one round trip on a cluster is well under
//    one).
// Items of a batch are independent: each is answered on its own as soon as
// the server can, so one worker's long wait never holds another's answer
// (a read merged into another worker's would: see store_cache.h). torchrun
// has no such layer: every worker of a c10d job sends its own requests to
// the TCPStore.
#pragma once

#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/store_proxy/store_cache.h"

namespace meshrun::agent {

// One request of a batch.
struct BatchItem {
  StoreUpstream::Id id = 0;
  StoreRequest request;
  StoreUpstream::Done done;
};

// The server side of the batcher: sends a batch as one call.
class BatchUpstream {
 public:
  virtual ~BatchUpstream() = default;
  // Sends `items` as one server call. Each item's `done` runs exactly once
  // (any thread, possibly inside this call) with its own answer.
  // `accepted` runs exactly once: when the server has taken the batch (its
  // sets applied), or when the call ended without that (then every item's
  // done has its error). Thread-safe.
  virtual void StartBatch(std::vector<BatchItem> items, absl::AnyInvocable<void()> accepted) = 0;
  // Cancels item `id` of a batch in flight: its done gets CANCELLED now; the
  // call itself is cancelled once none of its items is waiting. No-op when
  // unknown or answered. Thread-safe.
  virtual void Cancel(StoreUpstream::Id id) = 0;
};

struct StoreBatcherOptions {
  // A batch holds at most this many items, and at most this many bytes of
  // keys and values (a larger single request still goes, alone): the
  // server refuses more than its max_batch_items (1024), and gRPC more than
  // its 4 MiB message limit.
  int max_items = 256;
  int64_t max_bytes = 1 << 20;
  // Publications held until this many are (the node's workers,
  // --nproc_per_node); 0 or 1: not held.
  int expected_publishers = 0;
  // The longest a publication is held (rdzv_conf store_proxy_batch_hold);
  // zero: not held.
  absl::Duration publication_hold = absl::Milliseconds(100);
};

struct StoreBatcherStats {
  int64_t items = 0;    // Requests sent.
  int64_t batches = 0;  // Server calls they went in.
  int64_t holds_ended_by_time = 0;  // Holds that ran out before every publisher came.
};

// True when `r` publishes write-once keys (every key it sets is one, and
// it sets at least one). Pure.
bool IsPublication(const StoreRequest& r);

// A StoreUpstream (what StoreCache sends through) that batches. Held
// requests are bounded by the cache's own bound on requests
// (store_proxy_max_waiters). Thread-safe.
class StoreBatcher : public StoreUpstream {
 public:
  // `upstream` must outlive the batcher. Starts a thread that ends holds
  // on time (when publications can be held).
  explicit StoreBatcher(BatchUpstream* upstream, StoreBatcherOptions options = StoreBatcherOptions());
  // Stops the thread; a request still held (StoreCache::Shutdown cancels
  // them first) is answered CANCELLED.
  ~StoreBatcher() override;

  void Start(Id id, StoreRequest request, Done done) override;
  // A held request is answered CANCELLED at once; one sent is cancelled in
  // its batch (BatchUpstream::Cancel).
  void Cancel(Id id) override;

  StoreBatcherStats stats() const;

 private:
  // The batch in flight was accepted: sends what is held, if anything.
  void OnAccepted();
  // Takes the next batch when one may go now (none awaiting acceptance, no
  // hold on); empty otherwise.
  std::vector<BatchItem> NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(std::vector<BatchItem> items);
  // Ends holds that ran out (the thread).
  void HoldTimer();

  BatchUpstream* const upstream_;
  const StoreBatcherOptions options_;
  // Publications are held (options ask for it); the timer thread runs.
  const bool holds_publications_;
  mutable absl::Mutex mu_;
  bool awaiting_acceptance_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<BatchItem> held_ ABSL_GUARDED_BY(mu_);
  // Publications in held_, and the hold on them (none when not holding).
  int publications_held_ ABSL_GUARDED_BY(mu_) = 0;
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time hold_until_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  StoreBatcherStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread timer_;
};

}  // namespace meshrun::agent
