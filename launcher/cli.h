// CLI11 parsing with meshrun's conventions, shared by `meshrun`,
// `meshrun server` and `meshrun mesh`.
#pragma once

#include <optional>
#include <string>

#include "CLI/CLI.hpp"

namespace meshrun::launcher {

// Parses argv into `app`. Returns nullopt to go on, or the exit code to
// return now: 0 after --help/--version (printed by CLI11), 2 after a bad
// flag, reported as one line "<who>: error: <what> (see <who> --help)"
// (CLI11 2.1 prints several lines and exits 100+ by default).
std::optional<int> ParseCli(CLI::App& app, int argc, char** argv, const std::string& who);

}  // namespace meshrun::launcher
