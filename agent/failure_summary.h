// The failure summary every node prints when the job fails (torchrun's
// "Root Cause" block, for the whole job), and the one-line description of a
// failure. Pure formatting.
#pragma once

#include <optional>
#include <string>

#include "proto/types.h"

namespace meshrun::agent {

// What the summary needs besides the root cause.
struct SummaryContext {
  std::string run_id;
  int64_t round = 0;
  std::string hostname;            // This node's, for the last line.
  std::string node_id;             // This node's: the error file is shown only here.
  std::string error_file;          // The root cause's error file on this node, "" when none.
  int restart_count = 0;           // Restarts used so far.
  int max_restarts = 0;
  int permanent_failure_exit_code = 0;  // To say why a failure was permanent.
};

// meshrun's exit code for a failure: its exit code, or 128+n for signal n.
int ExitCodeOfFailure(const rendezvous::WorkerFailure& f);

// "rank 3 (local_rank 1) on vm (node rank 1) failed with exit code 9".
std::string DescribeFailure(const rendezvous::WorkerFailure& f);

// The summary block (several lines, each ending in '\n'); "Root cause:
// unknown" when `root` is empty. Times in local time.
std::string FormatFailureSummary(const std::optional<rendezvous::WorkerFailure>& root, const SummaryContext& c);

}  // namespace meshrun::agent
