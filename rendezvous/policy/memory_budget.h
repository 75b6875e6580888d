// The server's one memory budget (limit max_server_memory): every object a
// client makes the server hold is charged here at its measured cost
// (docs/performance.md, "What the server holds, per object"), and refused
// once the budget is spent. Members of running jobs keep a reserve that
// nobody else may use, so that a flood by anyone else never stops a job.
// Pure domain (no gRPC).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace meshrun::rendezvous {

// What the server holds for clients, by kind. Each kind's cost per object
// (the k...Cost constants below) was measured as the server's RSS growth
// per object under a flood of that object alone (docs/performance.md).
enum class HeldKind {
  kStoreKey,      // A store key: its table slot, key and value (cost + their bytes).
  kRun,           // A run: its maps, store and timers, before any node.
  kNode,          // A node a run knows: credential, last heartbeat, map slots.
  kEventStream,   // A Watch stream: the gRPC call, its reactor and queue.
  kQueuedEvent,   // An event queued to a stream not read yet (its bytes).
  kParkedWait,    // A parked store read (KvGet/Wait): the gRPC call and its waiter.
  kHealthStream,  // A grpc.health.v1 Watch stream.
  kParkedJoin,    // A Join call waiting for its round (not answered on a stream): the gRPC call.
  kCount
};

// Bytes charged per object of a kind, over the bytes of its strings where
// those are charged too (keys and values). Measured on Debian 12's gRPC 1.51
// with jemalloc (the meshrun binary) as RSS growth / objects under a flood
// of that kind alone (tests/support/flood_client.cc; docs/performance.md):
// a key with a 10-byte name and an empty value 123 B (1,048,576 keys over
// 52 runs), a run 3.2 KiB (4,000 store-only runs), an event stream with
// its node 19.3 KiB (20,000 over 32 connections), a parked read 14.8 KiB
// (20,000), a health Watch stream 18.0 KiB (16,384). A node's entry (its
// credential and map slots) is the measured ~600 B of run.h. Parked reads
// and health Watch streams are charged more than their steady cost (22 and
// 24 KiB): under the floods of tests/e2e/flood_test.cc, refused calls
// retried at once fill the rest of each connection's call slots, and at
// 16 and 18 KiB the server's peak went past 1.25x the budget (350 and 320.6
// MiB for 256 MiB; docs/performance.md).
inline constexpr int64_t kStoreKeyCost = 128;
inline constexpr int64_t kRunCost = 4 << 10;  // Without its timeline: RunCharge adds it.
inline constexpr int64_t kNodeCost = 640;
inline constexpr int64_t kEventStreamCost = 18 << 10;
inline constexpr int64_t kParkedWaitCost = 22 << 10;
inline constexpr int64_t kHealthStreamCost = 24 << 10;
// A parked Join holds its gRPC call as a parked read does. It is charged
// more than its steady cost: the charge also pays for the call arenas of
// refused joins that a flood sends again at once (the measurements:
// docs/performance.md, "Parked joins against the memory budget").
inline constexpr int64_t kParkedJoinCost = 32 << 10;

// Who an allocation is for. kMember: a joined member of a run, or a node
// whose join is in progress, or a run with such nodes (its store keys and
// parked reads, its event streams). kOther: everything else (store-only
// runs, status watchers, nodes that have not joined, health watchers).
enum class Claimant { kMember, kOther };

// The short name of a kind ("store keys", "event streams", ...).
absl::string_view HeldKindName(HeldKind kind);

// The default budget: a quarter of the machine's memory (or of the cgroup's
// memory.max when that is lower), at most 2 GiB, at least 64 MiB. Reads
// /proc and /sys once per call.
int64_t DefaultServerMemory();

// Thread-safe: charges and releases are lock-free (atomics); Describe takes
// a consistent-enough snapshot for a message.
class MemoryBudget {
 public:
  // `limit` bytes in all (> 0). `member_reserve` bytes of it (at most the
  // limit) only kMember charges may use: kOther charges are refused once
  // limit - member_reserve is held.
  explicit MemoryBudget(int64_t limit, int64_t member_reserve);

  // Charges `count` objects of `kind` costing `bytes` in all. OK, or
  // RESOURCE_EXHAUSTED (nothing charged) naming the budget, what holds it
  // by kind, and `what` (the refused request, e.g. "a new store key in run
  // 'job1'"). `bytes` >= 0.
  absl::Status Charge(HeldKind kind, int64_t count, int64_t bytes, Claimant who, absl::string_view what);
  // Charges without refusing (what must be served whatever it costs, such
  // as an event queued to a member's stream, which is bounded per stream).
  void ForceCharge(HeldKind kind, int64_t count, int64_t bytes);
  // Gives back what a Charge or ForceCharge took (the same count and bytes).
  // When at least `release_batch` bytes were given back since the last
  // call of the release hook, calls it (the server gives free heap back to
  // the system then: MemoryReleaser).
  void Release(HeldKind kind, int64_t count, int64_t bytes);

  int64_t limit() const { return limit_; }
  int64_t member_reserve() const { return reserve_; }
  // Bytes held now, in all or of one kind; objects held of one kind.
  int64_t held() const { return held_.load(std::memory_order_relaxed); }
  int64_t held(HeldKind kind) const { return bytes_[Index(kind)].load(std::memory_order_relaxed); }
  int64_t objects(HeldKind kind) const { return counts_[Index(kind)].load(std::memory_order_relaxed); }
  // Charges refused so far.
  int64_t refusals() const { return refusals_.load(std::memory_order_relaxed); }
  // "max_server_memory=256.0 MiB: 250.1 MiB held (store keys 180.2 MiB in
  // 1,000,000; event streams 35.2 MiB in 2,000; ...)": the kinds holding
  // anything, largest first.
  std::string Describe() const;

  // Set once before use (not thread-safe against Release). `fn` runs on the
  // releasing thread, outside any lock of the budget; it must be cheap.
  void SetReleaseHook(std::function<void()> fn, int64_t release_batch = 16 << 20);

 private:
  static size_t Index(HeldKind kind) { return static_cast<size_t>(kind); }
  const int64_t limit_;
  const int64_t reserve_;
  std::atomic<int64_t> held_{0};
  std::array<std::atomic<int64_t>, static_cast<size_t>(HeldKind::kCount)> bytes_{};
  std::array<std::atomic<int64_t>, static_cast<size_t>(HeldKind::kCount)> counts_{};
  std::atomic<int64_t> refusals_{0};
  std::atomic<int64_t> released_since_hook_{0};
  std::function<void()> hook_;
  int64_t release_batch_ = 16 << 20;
};

// A charge held by an object (a stream, a parked call) and given back when
// the object goes. Movable, not copyable. An empty one (default, or after a
// move) gives back nothing.
class HeldCharge {
 public:
  HeldCharge() = default;
  HeldCharge(MemoryBudget* budget, HeldKind kind, int64_t count, int64_t bytes)
      : budget_(budget), kind_(kind), count_(count), bytes_(bytes) {}
  HeldCharge(HeldCharge&& o) noexcept { *this = std::move(o); }
  HeldCharge& operator=(HeldCharge&& o) noexcept;
  HeldCharge(const HeldCharge&) = delete;
  HeldCharge& operator=(const HeldCharge&) = delete;
  ~HeldCharge() { Reset(); }
  // Gives the charge back now (no-op when empty).
  void Reset();
  explicit operator bool() const { return budget_ != nullptr; }

 private:
  MemoryBudget* budget_ = nullptr;
  HeldKind kind_ = HeldKind::kStoreKey;
  int64_t count_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace meshrun::rendezvous
