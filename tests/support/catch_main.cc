// The test binaries' main (Catch2's), and a listener that, when each test
// case ends, kills whatever it started with StartCommand and left running (a
// failed REQUIRE returns before the test's own waits), so that no process
// outlives its test case to take ports, CPU or names from the next ones; and
// prints the skip marker of a test case that skipped (skip.h).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstdio>
#include <mutex>

#include "tests/support/skip.h"
#include "tests/support/subprocess.h"

namespace meshrun::testing {
namespace {

std::mutex skip_mu;
std::string skip_reason;  // Guarded by skip_mu.

}  // namespace

void SkipTestCase(const std::string& why) {
  WARN("SKIPPED: " << why);
  std::lock_guard<std::mutex> lock(skip_mu);
  skip_reason = why.empty() ? "(no reason given)" : why;
}

std::string TakeSkipReason() {
  std::lock_guard<std::mutex> lock(skip_mu);
  std::string why;
  why.swap(skip_reason);
  return why;
}

}  // namespace meshrun::testing

namespace {

struct EndOfTestCase : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    const int killed = meshrun::testing::KillStartedCommands();
    if (killed > 0) {
      std::fprintf(stderr, "test support: killed %d command(s) that '%s' left running\n", killed,
                   stats.testInfo.name.c_str());
    }
    const std::string why = meshrun::testing::TakeSkipReason();
    // A failure stands: CTest would count the marker as a skip whatever
    // the exit code.
    if (!why.empty() && stats.totals.assertions.failed == 0) {
      std::printf("%s: %s: %s\n", meshrun::testing::kSkipMarker, stats.testInfo.name.c_str(), why.c_str());
      std::fflush(stdout);
    }
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(EndOfTestCase)
