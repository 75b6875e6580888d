// Gives the heap's free memory back to the operating system after a burst.
// An allocator keeps what the server freed for reuse, so its RSS stays at
// the peak: 10,000 agents' parked joins, or every connection of a job that
// left (bench/rdzv_scale measured ~700 MiB kept with glibc after 10,000
// agents left). ReleaseFreeMemory returns the free pages (jemalloc's arena
// purge, or glibc's malloc_trim(0)); MemoryReleaser runs it on the server's
// timer thread, `delay` after a request, at most one pending at a time.
// Pure domain (no gRPC).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "rendezvous/policy/timer.h"

namespace meshrun::rendezvous {

class MemoryReleaser {
 public:
  // `timer` must outlive the releaser's pending release (it does when both
  // belong to one server: the timer drops callbacks not yet run when it
  // stops). `delay` > 0.
  MemoryReleaser(DeadlineTimer* timer, absl::Duration delay);

  // Asks for a release `delay` from now, unless one is pending already (so
  // a burst of requests costs one trim per `delay`). Cheap (an atomic
  // exchange); thread-safe; never blocks.
  void Request();

  // Releases done so far (for tests and logs). Thread-safe.
  int64_t releases() const;

 private:
  struct State {
    std::atomic<bool> pending{false};
    std::atomic<int64_t> releases{0};
  };
  DeadlineTimer* const timer_;
  const absl::Duration delay_;
  const std::shared_ptr<State> state_;
};

// Returns the heap's free pages to the operating system now: on jemalloc
// (the `meshrun` binary, launcher/allocator.cc) the calling thread's cache
// is flushed and every arena purged; on glibc, malloc_trim(0). Returns the
// RSS in bytes it gave back, as far as /proc/self/statm tells (0 when it
// cannot read it). Thread-safe; takes each arena's lock in turn
// (milliseconds for a heap of hundreds of MiB).
int64_t ReleaseFreeMemory();

// True when this process's malloc is jemalloc (its `mallctl` is linked in).
// Thread-safe.
bool RunsOnJemalloc();

}  // namespace meshrun::rendezvous
