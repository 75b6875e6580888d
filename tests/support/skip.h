// Skipping a Catch2 test case so that CTest counts it as skipped, never as
// passed. Catch2 v2 has no skip of its own: a test case that cannot run here
// calls MESHRUN_SKIP("why") (which returns from it); when the test case
// ends with no failed assertion, the test main prints one line
//   MESHRUN_TEST_SKIPPED: <test case name>: <why>
// on stdout, and the CTest entries of the test binaries carry
// SKIP_REGULAR_EXPRESSION "MESHRUN_TEST_SKIPPED" (tests/CMakeLists.txt), so
// CTest reports the entry as "Skipped". A test case that failed before it
// skipped prints no such line and fails as usual (CTest's skip expression
// wins over the exit code, so the line must never follow a failure).
// Call it from the thread that runs the test case; it must be the last
// thing the test case does.
#pragma once

#include <string>

namespace meshrun::testing {

// The marker CTest looks for; printed by the test main only.
inline constexpr const char* kSkipMarker = "MESHRUN_TEST_SKIPPED";

// Records that the running test case is skipped, and why (also shown as a
// Catch2 warning). Use MESHRUN_SKIP, which returns right after.
void SkipTestCase(const std::string& why);

// The reason given by SkipTestCase in the running test case, and forgets it
// ("" when none). Called by the test main when a test case ends.
std::string TakeSkipReason();

}  // namespace meshrun::testing

#define MESHRUN_SKIP(why)                      \
  do {                                         \
    ::meshrun::testing::SkipTestCase(why);     \
    return;                                    \
  } while (false)
