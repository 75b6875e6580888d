// CLI11 parsing with meshrun's conventions, shared by `meshrun`,
// `meshrun server` and `meshrun mesh`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "CLI/CLI.hpp"

namespace meshrun::launcher {

// Parses argv into `app`. Returns nullopt to go on, or the exit code to
// return now: 0 after --help/--version (printed by CLI11), 2 after a bad
// flag, reported as one line "<who>: error: <what> (see <who> --help)"
// (CLI11 2.1 prints several lines and exits 100+ by default), with a
// did-you-mean for a misspelled flag. A flag given twice takes its last
// value (scripts append overrides: `--rdzv_conf=a=1 ... --rdzv_conf=a=2`),
// as torchrun's argparse does; options that collect values (`--limit`)
// keep them all.
std::optional<int> ParseCli(CLI::App& app, int argc, char** argv, const std::string& who);

// The names among `candidates` closest to `name` by edit distance (at most
// `max`, nearest first, ties in the candidates' order), keeping only those
// within a distance of max(2, |name| / 3): a misspelling, not any name.
// Pure.
std::vector<std::string> NearestNames(absl::string_view name, const std::vector<std::string>& candidates,
                                      int max = 3);

// " (did you mean --a_b?)" for an unknown flag ("--a-bc=1", "-x") of
// `app`: first the long flags it is a prefix of (torchrun's argparse takes
// `--nproc_per` for `--nproc_per_node`; meshrun asks for the whole name),
// else its nearest long flags as NearestNames finds them; 3 at most, spelled
// as the user spells (dashes or underscores); "" when none is near. Pure.
std::string DidYouMeanFlag(const CLI::App& app, absl::string_view unknown);

}  // namespace meshrun::launcher
