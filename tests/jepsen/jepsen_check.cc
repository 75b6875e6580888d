// jepsen_check: checks recorded store histories for linearizability (per
// key) and probe records for two replicas serving at once.
//
//   jepsen_check [--max_states=N] --history FILE... --probes FILE...
//
// Prints one line per key, one for the probes, then a verdict line:
//   exit 0: "jepsen_check: OK: ..."
//   exit 1: "jepsen_check: VIOLATION: ..." per kind of violation, each
//           followed by its explanation
//   exit 2: bad arguments or input: one line "jepsen_check: error: ..."
//   exit 3: no violation, but some key's search hit --max_states
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tests/jepsen/history.h"
#include "tests/jepsen/linearizability.h"
#include "tests/jepsen/serving_intervals.h"

namespace meshrun::jepsen {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitViolation = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitUndecided = 3;
constexpr size_t kOverlapsShown = 10;

struct Inputs {
  std::vector<Operation> history;
  std::vector<Probe> probes;
};

// Reads and merges every file; the first error's message otherwise.
absl::StatusOr<Inputs> LoadInputs(const std::vector<std::string>& history_files,
                                  const std::vector<std::string>& probe_files) {
  Inputs inputs;
  for (const std::string& path : history_files) {
    absl::StatusOr<std::vector<Operation>> ops = ReadHistoryFile(path);
    if (!ops.ok()) return ops.status();
    inputs.history.insert(inputs.history.end(), ops->begin(), ops->end());
  }
  for (const std::string& path : probe_files) {
    absl::StatusOr<std::vector<Probe>> probes = ReadProbeFile(path);
    if (!probes.ok()) return probes.status();
    inputs.probes.insert(inputs.probes.end(), probes->begin(), probes->end());
  }
  return inputs;
}

std::string KeyName(const KeyVerdict& verdict) {
  return absl::StrCat("key ", QuoteValue(verdict.key));
}

void PrintSummaries(const std::vector<KeyVerdict>& verdicts, const ServingReport& serving) {
  for (const KeyVerdict& v : verdicts) {
    absl::PrintF("%s: %d ops checked (%d ok, %d info; %d dropped): %s (%d states)\n", KeyName(v),
                 v.ok_ops + v.info_ops, v.ok_ops, v.info_ops, v.dropped_ops,
                 VerdictName(v.verdict), v.states);
  }
  absl::PrintF("probes: %d replicas, %d probes, %d streaks: %s\n", serving.replicas,
               serving.probes, serving.streaks.size(),
               serving.overlaps.empty()
                   ? std::string("no two replicas served at once")
                   : absl::StrFormat("%d overlap(s) of two replicas serving", serving.overlaps.size()));
}

// Prints the verdict line(s) of `wanted` keys, with their explanations;
// returns how many keys had that verdict.
size_t PrintKeys(const std::vector<KeyVerdict>& verdicts, Verdict wanted, absl::string_view head) {
  std::vector<std::string> names;
  for (const KeyVerdict& v : verdicts) {
    if (v.verdict == wanted) names.push_back(KeyName(v));
  }
  if (names.empty()) return 0;
  absl::PrintF("jepsen_check: %s: %s\n", head, absl::StrJoin(names, ", "));
  for (const KeyVerdict& v : verdicts) {
    if (v.verdict == wanted) absl::PrintF("%s:\n%s\n", KeyName(v), v.explanation);
  }
  return names.size();
}

void PrintOverlaps(const ServingReport& serving, int64_t origin_ns) {
  absl::PrintF("jepsen_check: VIOLATION: two replicas served at once (%d overlap(s))\n",
               serving.overlaps.size());
  for (size_t i = 0; i < serving.overlaps.size() && i < kOverlapsShown; ++i) {
    absl::PrintF("  %s\n", FormatOverlap(serving.overlaps[i], origin_ns));
  }
  if (serving.overlaps.size() > kOverlapsShown) {
    absl::PrintF("  ... and %d more\n", serving.overlaps.size() - kOverlapsShown);
  }
}

int Check(const Inputs& inputs, int64_t max_states) {
  CheckOptions options;
  options.max_states = max_states;
  const std::vector<KeyVerdict> verdicts = CheckLinearizability(inputs.history, options);
  const ServingReport serving = CheckServingIntervals(inputs.probes);
  PrintSummaries(verdicts, serving);
  const size_t violations =
      PrintKeys(verdicts, Verdict::kNotLinearizable, "VIOLATION: not linearizable");
  if (!serving.overlaps.empty()) PrintOverlaps(serving, EarliestSend(inputs.probes));
  const size_t undecided = PrintKeys(
      verdicts, Verdict::kUndecided,
      absl::StrFormat("UNDECIDED: search stopped at --max_states=%d for", max_states));
  if (violations > 0 || !serving.overlaps.empty()) return kExitViolation;
  if (undecided > 0) return kExitUndecided;
  size_t checked = 0;
  for (const KeyVerdict& v : verdicts) checked += v.ok_ops + v.info_ops;
  absl::PrintF("jepsen_check: OK: %d ops on %d keys linearizable; no two replicas served at once\n",
               checked, verdicts.size());
  return kExitOk;
}

}  // namespace
}  // namespace meshrun::jepsen

int main(int argc, char** argv) {
  CLI::App app{"Checks store histories for linearizability and probes for two replicas serving "
               "at once.",
               "jepsen_check"};
  std::vector<std::string> history_files;
  std::vector<std::string> probe_files;
  int64_t max_states = meshrun::jepsen::CheckOptions().max_states;
  app.add_option("--history", history_files, "History files (9 tab-separated fields a line)")
      ->required()
      ->expected(1, -1);
  app.add_option("--probes", probe_files, "Probe files (4 tab-separated fields a line)")
      ->required()
      ->expected(1, -1);
  app.add_option("--max_states", max_states,
                 "States one key's search may remember before it gives up (undecided)")
      ->check(CLI::Range(int64_t{1}, INT64_MAX));
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& success) {
    return app.exit(success);
  } catch (const CLI::ParseError& error) {
    std::fprintf(stderr, "jepsen_check: error: %s\n", error.what());
    return meshrun::jepsen::kExitBadInput;
  }
  absl::StatusOr<meshrun::jepsen::Inputs> inputs =
      meshrun::jepsen::LoadInputs(history_files, probe_files);
  if (!inputs.ok()) {
    std::fprintf(stderr, "jepsen_check: error: %s\n", std::string(inputs.status().message()).c_str());
    return meshrun::jepsen::kExitBadInput;
  }
  return meshrun::jepsen::Check(*inputs, max_states);
}
