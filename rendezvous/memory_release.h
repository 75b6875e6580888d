// Gives the heap's free memory back to the operating system after a burst.
// glibc keeps what the server freed in its arenas, so its RSS stays at the
// peak: 10,000 agents' parked joins, or every connection of a job that
// left (bench/rdzv_scale measured ~700 MiB kept after 10,000 agents left).
// malloc_trim(0) returns the free pages; it is run on the server's timer
// thread, `delay` after a request, at most one pending at a time. Pure
// domain (no gRPC).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "rendezvous/timer.h"

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

// Returns the heap's free pages to the operating system now (glibc's
// malloc_trim(0)); the RSS in bytes it gave back, as far as /proc/self/statm
// tells (0 when it cannot read it). Thread-safe; takes each malloc arena's
// lock in turn (milliseconds for a heap of hundreds of MiB).
int64_t ReleaseFreeMemory();

}  // namespace meshrun::rendezvous
