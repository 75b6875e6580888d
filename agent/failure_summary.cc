#include "agent/failure_summary.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/process.h"

namespace meshrun::agent {

int ExitCodeOfFailure(const rendezvous::WorkerFailure& f) { return f.signal > 0 ? 128 + f.signal : f.exit_code; }

std::string DescribeFailure(const rendezvous::WorkerFailure& f) {
  std::string who = f.rank >= 0 ? absl::StrCat("rank ", f.rank, " (local_rank ", f.local_rank, ")")
                                : std::string("a node");
  std::string how = f.signal > 0 ? absl::StrCat("signal ", SignalName(f.signal)) : absl::StrCat("exit code ", f.exit_code);
  return absl::StrCat(who, " on ", f.hostname, " (node rank ", f.node_rank, ") failed with ", how);
}

std::string FormatFailureSummary(const std::optional<rendezvous::WorkerFailure>& root, const SummaryContext& c) {
  const std::string bar(60, '=');
  const std::string line(60, '-');
  std::string out = absl::StrCat(bar, "\nmeshrun: ", c.scope, " FAILED (run '", c.run_id, "', round ", c.round, ")",
                                 root && root->permanent ? ": a permanent failure, not restarted" : "", "\n", line,
                                 "\n");
  if (root) {
    const rendezvous::WorkerFailure& f = *root;
    absl::StrAppend(&out, "Root cause (first observed failure):\n");
    absl::StrAppend(&out, "  time      : ", absl::FormatTime("%Y-%m-%d_%H:%M:%S", f.time, absl::LocalTimeZone()), "\n");
    absl::StrAppend(&out, "  host      : ", f.hostname, " (node rank ", f.node_rank, ")\n");
    if (f.rank >= 0) absl::StrAppend(&out, "  rank      : ", f.rank, " (local_rank: ", f.local_rank, ")\n");
    if (f.signal > 0) {
      absl::StrAppend(&out, "  exitcode  : ", ExitCodeOfFailure(f), " (signal ", SignalName(f.signal), ")\n");
    } else {
      absl::StrAppend(&out, "  exitcode  : ", f.exit_code, "\n");
    }
    if (f.node_id == c.node_id) {
      absl::StrAppend(&out, "  error_file: ", c.error_file.empty() ? "<N/A>" : c.error_file, "\n");
    }
    if (f.permanent) {
      const bool by_code =
          f.signal == 0 && c.permanent_failure_exit_code != 0 && f.exit_code == c.permanent_failure_exit_code;
      absl::StrAppend(&out, "  permanent : yes, not restarted (",
                      by_code    ? absl::StrCat("exit code ", f.exit_code, " is --permanent_failure_exit_code")
                      : f.rank < 0 ? std::string("meshrun's, not a worker's: see the message")
                                   : std::string("its error file says \"permanent\": true"),
                      "); restarts used: ", c.restart_count, " of ", c.max_restarts, "\n");
    }
    if (!f.message.empty()) {
      std::vector<absl::string_view> lines = absl::StrSplit(f.message, '\n');
      absl::StrAppend(&out, "  message   : ", absl::StrJoin(lines, "\n              "), "\n");
    }
  } else {
    absl::StrAppend(&out, "Root cause: unknown\n");
  }
  std::string others;
  if (c.others_stopped > 0) {
    others = absl::StrCat(c.others_stopped, " stopped by meshrun");
    if (c.others_exited_ok > 0) absl::StrAppend(&others, " (", c.others_exited_ok, " had exited 0)");
  } else if (c.others_exited_ok > 0) {
    others = absl::StrCat("none running (", c.others_exited_ok, " had exited 0)");
  } else {
    others = "none";
  }
  absl::StrAppend(&out, line, "\nOther workers on this node (", c.hostname, "): ", others, "\n", bar, "\n");
  return out;
}

}  // namespace meshrun::agent
