#include "rendezvous/memory_release.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>

#include "common/logging.h"

namespace meshrun::rendezvous {
namespace {

// Resident bytes of this process (/proc/self/statm), or -1.
int64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long long size = 0, resident = -1;
  if (std::fscanf(f, "%lld %lld", &size, &resident) != 2) resident = -1;
  std::fclose(f);
  return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

}  // namespace

int64_t ReleaseFreeMemory() {
  const int64_t before = ResidentBytes();
  malloc_trim(0);
  const int64_t after = ResidentBytes();
  return before < 0 || after < 0 || after > before ? 0 : before - after;
}

MemoryReleaser::MemoryReleaser(DeadlineTimer* timer, absl::Duration delay)
    : timer_(timer), delay_(delay), state_(std::make_shared<State>()) {}

void MemoryReleaser::Request() {
  if (state_->pending.exchange(true)) return;
  timer_->Schedule(absl::Now() + delay_, [state = state_] {
    state->pending = false;
    const absl::Time start = absl::Now();
    const int64_t freed = ReleaseFreeMemory();
    state->releases.fetch_add(1);
    Logger("rdzv")->debug("returned {} KiB of free heap memory to the system in {}", freed / 1024,
                          absl::FormatDuration(absl::Now() - start));
  });
}

int64_t MemoryReleaser::releases() const { return state_->releases.load(); }

}  // namespace meshrun::rendezvous
