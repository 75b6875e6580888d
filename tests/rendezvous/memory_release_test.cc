#include "rendezvous/policy/memory_release.h"

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

namespace meshrun::rendezvous {

TEST_CASE("a burst of release requests costs one release per delay", "[memory_release]") {
  DeadlineTimer timer;
  MemoryReleaser r(&timer, absl::Milliseconds(50));
  for (int i = 0; i < 1000; ++i) r.Request();
  CHECK(r.releases() == 0);  // Not before the delay.
  for (int i = 0; i < 200 && r.releases() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  CHECK(r.releases() == 1);
  absl::SleepFor(absl::Milliseconds(100));
  CHECK(r.releases() == 1);  // Nothing more was asked for.
  r.Request();
  for (int i = 0; i < 200 && r.releases() == 1; ++i) absl::SleepFor(absl::Milliseconds(10));
  CHECK(r.releases() == 2);
}

TEST_CASE("releasing free memory gives back pages that freed blocks left between live ones", "[memory_release]") {
#if defined(__SANITIZE_ADDRESS__)
  SUCCEED("AddressSanitizer's allocator does not use malloc_trim");
#else
  // 64 MiB in 4 KiB blocks; every 16th stays: the freed ones between them
  // are whole pages that only a trim returns (the heap's top cannot shrink
  // past the live ones).
  std::vector<std::unique_ptr<char[]>> blocks;
  for (int i = 0; i < 16384; ++i) {
    blocks.emplace_back(new char[4096]);
    blocks.back()[0] = static_cast<char>(i);  // Touched: resident.
    for (int k = 0; k < 4096; k += 512) blocks.back()[k] = 1;
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i % 16 != 0) blocks[i].reset();
  }
  const int64_t freed = ReleaseFreeMemory();
  CHECK(freed > 16 << 20);
#endif
}

}  // namespace meshrun::rendezvous
