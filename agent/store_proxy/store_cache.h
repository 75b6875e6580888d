// The domain of a node's store proxy (docs/design.md section 1 item 6): the
// node's workers read the store through their agent, which turns identical
// concurrent reads into one server request and keeps write-once values for
// the round. No gRPC here: the proxy (store_proxy.h) adapts the workers'
// gRPC calls to this class and this class's requests to the agent's
// connection to the server (StoreUpstream).
//
// What is cached, honestly: only write-once keys (IsWriteOnceKey,
// common/store.h: "mesh/...", libmesh's unique ids, Gloo addresses,
// descriptions and verdicts), whose value the server itself keeps from
// changing once set in a round. A value seen once is then the value for the
// rest of the round, so answering from the cache, or from another worker's
// read, is exactly what the server would answer. Every other key is
// mutable (c10d's set overwrites; add, delete), and a request that reads
// one goes to the server as it is, uncached and not merged with others.
// torchrun has no such layer: every worker of a c10d job talks to the
// TCPStore itself.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshrun::agent {

struct StoreCacheOptions {
  // Bytes (keys plus values) of write-once values kept for the round
  // (rdzv_conf store_proxy_cache_bytes). When full, further values are not
  // kept: reads stay correct and still share requests in flight; they just
  // go to the server again.
  int64_t max_cache_bytes = 64 << 20;
  // Worker requests the proxy holds at once, waiting or in flight
  // (rdzv_conf store_proxy_max_waiters); one more is refused
  // RESOURCE_EXHAUSTED naming the limit.
  int64_t max_waiters = 65536;
  // The run id, for messages.
  std::string label;
};

// One store request in the shape of the server's KvMultiGet: set
// set_keys[i] to set_values[i] (all or nothing), then read `keys`, waiting
// up to `wait` (zero: answer at once, NOT_FOUND when a key is absent;
// absl::InfiniteDuration(): no limit) for all of them, in the scope `round`.
struct StoreRequest {
  int64_t round = 0;
  std::vector<std::string> set_keys;
  std::vector<std::string> set_values;
  std::vector<std::string> keys;
  absl::Duration wait = absl::ZeroDuration();
};

// Where the cache sends what it cannot answer: the server's store, over
// the agent's connection.
class StoreUpstream {
 public:
  using Id = uint64_t;
  // The values of the request's keys, in order, or the server's error.
  using Done = absl::AnyInvocable<void(absl::StatusOr<std::vector<std::string>>)>;
  virtual ~StoreUpstream() = default;
  // Sends `request` as one server request. `done` runs exactly once, on
  // any thread, possibly before Start returns. `id` names the request for
  // Cancel. Thread-safe.
  virtual void Start(Id id, StoreRequest request, Done done) = 0;
  // Cancels request `id` if it is still in flight (its `done` then gets
  // CANCELLED); a no-op otherwise. Thread-safe.
  virtual void Cancel(Id id) = 0;
};

struct StoreCacheStats {
  int64_t requests = 0;           // Worker requests served (Submit).
  int64_t upstream_requests = 0;  // Requests sent to the server.
  int64_t passed_through = 0;     // Worker requests sent on as they were.
  int64_t keys_from_cache = 0;    // Keys answered from the round's cache.
  int64_t keys_coalesced = 0;     // Keys that joined another read in flight.
  int64_t cached_keys = 0;
  int64_t cached_bytes = 0;
  int64_t values_not_kept = 0;    // Values not cached: max_cache_bytes reached.
};

class StoreCache {
 public:
  using ReadId = uint64_t;
  using Done = StoreUpstream::Done;

  // `upstream` must outlive the cache. No round is current until SetRound:
  // until then every request passes through.
  explicit StoreCache(StoreUpstream* upstream, StoreCacheOptions options = StoreCacheOptions());
  // Shutdown first (see there).
  ~StoreCache() = default;

  // Serves one worker request; `done` gets the values of request.keys in
  // order (or an error), exactly once, on any thread (possibly inside this
  // call). Returns an id for Cancel (0 when answered at once).
  //  - Reads of the current round whose keys are all write-once: each key is
  //    answered from the cache, or joins a read of it already in flight
  //    (one that waits no longer than this one may, and for no key this one
  //    does not want), or goes to the server in one request together with
  //    this request's sets. The answer comes
  //    when every key is known and this request's own sets are confirmed.
  //  - Anything else (another round, a mutable key): one server request,
  //    exactly this one; its write-once values are learned.
  // Errors are the server's for this request's own server request; a key
  // that joined another worker's read which failed is asked again (or,
  // past this request's deadline, DEADLINE_EXCEEDED naming the keys).
  // RESOURCE_EXHAUSTED naming max_waiters when that many are held.
  // Thread-safe.
  ReadId Submit(StoreRequest request, Done done);

  // The worker gave up on request `id` (its call was cancelled): it is
  // answered CANCELLED, and a server request that no other request needs
  // any more is cancelled. No-op when already answered. Thread-safe.
  void Cancel(ReadId id);

  // Answers every held request CANCELLED and cancels every server request
  // in flight. Call before destroying the cache, then wait until the
  // upstream has run every `done` (they call back into the cache).
  void Shutdown();

  // A new round: the previous rounds' cached values are dropped, and their
  // requests still held are answered ABORTED (as the server does when a
  // run moves on). Rounds only move forward. Thread-safe.
  void SetRound(int64_t round);
  int64_t round() const;

  // Tell the cache what the server confirmed outside Submit (the proxy's
  // pass-through calls): keys set by a successful Set/MultiSet, and a
  // CompareSet's outcome (the value is kept when the key is write-once and
  // the swap happened or `expected` was empty: then `value` is what the
  // key holds; an absent key with another expectation answers `expected`,
  // c10d's rule, which says nothing about the key). Thread-safe.
  void LearnWrites(int64_t round, const std::vector<std::string>& keys, const std::vector<std::string>& values);
  void LearnCompareSet(int64_t round, const std::string& key, const std::string& expected, const std::string& value,
                       bool swapped);

  // True when every key of `keys` is write-once and its value is cached
  // for `round` (a Check the proxy answers itself). Thread-safe.
  bool AllCached(int64_t round, const std::vector<std::string>& keys) const;

  StoreCacheStats stats() const;

 private:
  using FetchId = StoreUpstream::Id;
  struct Fetch {
    int64_t round = 0;
    std::vector<std::string> keys;        // What it reads (deduplicated for coalesced reads).
    std::vector<std::string> set_keys;    // What it sets (learned on success).
    std::vector<std::string> set_values;
    absl::Time deadline;
    ReadId creator = 0;                   // 0 once the creator is gone.
    bool indexed = false;                 // Others may join it (in inflight_).
    std::vector<ReadId> needers;          // Held requests that need it.
    bool started = false;                 // Start has returned: Cancel reaches it.
    bool cancel_pending = false;          // Nobody needs it any more; cancel once started.
  };
  struct Waiter {
    int64_t round = 0;
    std::vector<std::string> keys;
    std::vector<std::optional<std::string>> values;
    size_t missing = 0;
    absl::Time deadline;
    bool coalesced = false;               // false: a pass-through.
    FetchId sets_fetch = 0;               // Carries its sets: done must wait for it.
    std::vector<FetchId> fetches;         // Every fetch it needs (created or joined).
    Done done;
  };
  using Ready = std::vector<std::pair<Done, absl::StatusOr<std::vector<std::string>>>>;
  struct Start {
    FetchId id;
    StoreRequest request;
  };

  // Stores a write-once value of the current round and fills the requests
  // waiting for it.
  void LearnLocked(const std::string& key, const std::string& value, Ready& ready, std::vector<FetchId>& cancel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes waiter `id` when it has every value and its sets are confirmed.
  void MaybeCompleteLocked(ReadId id, Ready& ready, std::vector<FetchId>& cancel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers and forgets waiter `id` with `result`; fetches nobody needs
  // any more go to `cancel`.
  void FinishLocked(ReadId id, absl::StatusOr<std::vector<std::string>> result, Ready& ready,
                    std::vector<FetchId>& cancel) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finds (cache, a fetch in flight, or a new fetch) every value waiter
  // `id` still misses and no fetch of its own covers.
  // `sets`: the request's sets, sent with its first fetch (Submit); null
  // when asking again after a joined read failed (then past the deadline
  // the waiter gets DEADLINE_EXCEEDED).
  void ResolveLocked(ReadId id, absl::Time now, StoreRequest* sets, std::vector<Start>& starts, Ready& ready,
                     std::vector<FetchId>& cancel) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  FetchId NewFetchLocked(ReadId creator, StoreRequest request, absl::Time deadline, bool indexed,
                         std::vector<Start>& starts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnindexLocked(FetchId id, const Fetch& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnFetchDone(FetchId id, absl::StatusOr<std::vector<std::string>> result);
  // Runs outside the lock: sends, cancels, answers.
  void Flush(std::vector<Start> starts, std::vector<FetchId> cancel, Ready ready);

  StoreUpstream* const upstream_;
  const StoreCacheOptions options_;
  mutable absl::Mutex mu_;
  int64_t round_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<FetchId, Fetch> fetches_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ReadId, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  // Current round only: key -> fetches in flight that read it, and ->
  // the coalesced requests waiting for it (each with the key's position in
  // the request; a key may repeat); the cached values.
  absl::flat_hash_map<std::string, std::vector<FetchId>> inflight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::vector<std::pair<ReadId, size_t>>> wanting_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  StoreCacheStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshrun::agent
