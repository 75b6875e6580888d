#include "rendezvous/policy/memory_release.h"

#include <malloc.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "common/logging.h"

// jemalloc's control interface, when the process runs on jemalloc (the
// `meshrun` binary links it: launcher/allocator.cc); null otherwise (unit
// tests, sanitizer builds), and glibc's malloc_trim is used instead.
extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen)
    __attribute__((weak));

namespace meshrun::rendezvous {
namespace {

// jemalloc's name for "every arena" (MALLCTL_ARENAS_ALL in jemalloc 5).
constexpr const char* kPurgeAllArenas = "arena.4096.purge";

// Resident bytes of this process (/proc/self/statm), or -1.
int64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long long size = 0, resident = -1;
  if (std::fscanf(f, "%lld %lld", &size, &resident) != 2) resident = -1;
  std::fclose(f);
  return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

// jemalloc's view of the heap, for the log: live bytes, and what the
// allocator keeps resident and in active pages (their difference is free
// space in partly used pages: fragmentation). Empty without jemalloc.
std::string HeapStats() {
  if (mallctl == nullptr) return "";
  uint64_t epoch = 1;
  size_t len = sizeof(epoch);
  mallctl("epoch", &epoch, &len, &epoch, len);  // Refreshes the statistics.
  size_t allocated = 0, active = 0, resident = 0;
  len = sizeof(size_t);
  if (mallctl("stats.allocated", &allocated, &len, nullptr, 0) != 0) return "";
  len = sizeof(size_t);
  mallctl("stats.active", &active, &len, nullptr, 0);
  len = sizeof(size_t);
  mallctl("stats.resident", &resident, &len, nullptr, 0);
  return fmt::format(" (heap: {} KiB live in {} KiB of active pages, {} KiB resident)", allocated / 1024,
                     active / 1024, resident / 1024);
}

}  // namespace

bool RunsOnJemalloc() { return mallctl != nullptr; }

int64_t ReleaseFreeMemory() {
  const int64_t before = ResidentBytes();
  if (mallctl != nullptr) {
    // The caller's cached blocks go back to their arenas, then every
    // arena's unused pages to the system (what dirty_decay_ms would do
    // over time). Failures only mean less was returned.
    mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
    mallctl(kPurgeAllArenas, nullptr, nullptr, nullptr, 0);
  } else {
    malloc_trim(0);
  }
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
    auto log = Logger("rdzv");
    if (log->should_log(spdlog::level::debug)) {
      log->debug("returned {} KiB of free heap memory to the system in {}{}", freed / 1024,
                 absl::FormatDuration(absl::Now() - start), HeapStats());
    }
  });
}

int64_t MemoryReleaser::releases() const { return state_->releases.load(); }

}  // namespace meshrun::rendezvous
