// What meshrun was built from, for `meshrun --version` and bug reports.
// The definitions are generated at every build (cmake/build_info.cmake).
#pragma once

#include <string_view>

namespace meshrun {

// The git commit of the build's source tree, 12 hex digits ("3f2a9c1d0b7e"),
// with "+dirty" when tracked files differed from it; "unknown" when built
// outside a git checkout (a source archive). Thread-safe (a constant).
std::string_view BuildCommit();

// The build's UTC day, "YYYY-MM-DD": SOURCE_DATE_EPOCH's when that was set
// (reproducible builds; scripts/package.sh sets it to the commit's time),
// else the commit's day in a git checkout, else the day of the build.
// Thread-safe (a constant).
std::string_view BuildDate();

}  // namespace meshrun
