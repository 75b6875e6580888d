// The test binaries' main (Catch2's), and a listener that kills whatever a
// test case started with StartCommand and left running (a failed REQUIRE
// returns before the test's own waits), so that no process outlives its test
// case to take ports, CPU or names from the next ones.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstdio>

#include "tests/support/subprocess.h"

namespace {

struct KillLeftovers : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    const int killed = meshrun::testing::KillStartedCommands();
    if (killed > 0) {
      std::fprintf(stderr, "test support: killed %d command(s) that '%s' left running\n", killed,
                   stats.testInfo.name.c_str());
    }
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(KillLeftovers)
