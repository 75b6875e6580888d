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
  // This node's other workers of the round (the root cause's worker left
  // out): still running when meshrun stopped them, and those that had
  // exited 0 before. Both 0: none (a node between rounds, or one worker).
  int others_stopped = 0;
  int others_exited_ok = 0;
  // What failed, for the title: "job", or "replica group <g>" (a job of
  // replica groups: the group's run failed, the job may go on).
  std::string scope = "job";
};

// meshrun's exit code for a failure: its exit code, or 128+n for signal n.
int ExitCodeOfFailure(const rendezvous::WorkerFailure& f);

// "rank 3 (local_rank 1) on vm (node rank 1) failed with exit code 9".
std::string DescribeFailure(const rendezvous::WorkerFailure& f);

// The summary block (several lines, each ending in '\n'); "Root cause:
// unknown" when `root` is empty. Times in local time. The last line says
// what became of this node's other workers: "N stopped by meshrun", "none
// running (M had exited 0)", or "none".
std::string FormatFailureSummary(const std::optional<rendezvous::WorkerFailure>& root, const SummaryContext& c);

}  // namespace meshrun::agent
