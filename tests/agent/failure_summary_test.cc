#include <catch2/catch.hpp>

#include <signal.h>

#include "agent/failure_summary.h"

using namespace meshrun::agent;
using meshrun::rendezvous::WorkerFailure;

namespace {

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("the failure summary names the root cause and why it was not restarted", "[summary]") {
  WorkerFailure f;
  f.node_id = "b";
  f.hostname = "hostb";
  f.node_rank = 1;
  f.rank = 3;
  f.local_rank = 1;
  f.exit_code = 78;
  f.permanent = true;
  f.message = "line1\nline2";
  SummaryContext c{"job", 0, "hosta", "a", "/x/err.json", 0, 3, 78};
  std::string s = FormatFailureSummary(f, c);
  CHECK(Has(s, "meshrun: job FAILED (run 'job', round 0): a permanent failure, not restarted\n"));
  CHECK(Has(s, "  host      : hostb (node rank 1)\n"));
  CHECK(Has(s, "  rank      : 3 (local_rank: 1)\n"));
  CHECK(Has(s, "  permanent : yes, not restarted (exit code 78 is --permanent_failure_exit_code); restarts used: 0 of 3\n"));
  CHECK(Has(s, "  message   : line1\n              line2\n"));
  // In a job of replica groups it is the group's run that failed.
  c.scope = "replica group 1";
  CHECK(Has(FormatFailureSummary(f, c), "meshrun: replica group 1 FAILED (run 'job', round 0)"));
  CHECK_FALSE(Has(s, "error_file"));  // Another node's failure.
  CHECK(Has(s, "Other workers on this node (hosta): none\n"));  // None counted.
  CHECK(ExitCodeOfFailure(f) == 78);

  c.permanent_failure_exit_code = 0;  // Then only the error file can have said so.
  c.node_id = "b";
  s = FormatFailureSummary(f, c);
  CHECK(Has(s, "(its error file says \"permanent\": true)"));
  CHECK(Has(s, "  error_file: /x/err.json\n"));

  WorkerFailure sig = f;
  sig.permanent = false;
  sig.exit_code = 0;
  sig.signal = SIGKILL;
  s = FormatFailureSummary(sig, c);
  CHECK(Has(s, "  exitcode  : 137 (signal SIGKILL)\n"));
  CHECK_FALSE(Has(s, "permanent"));
  CHECK(DescribeFailure(sig) == "rank 3 (local_rank 1) on hostb (node rank 1) failed with signal SIGKILL");
  CHECK(Has(FormatFailureSummary(std::nullopt, c), "Root cause: unknown\n"));
}

TEST_CASE("the failure summary says what became of this node's other workers", "[summary]") {
  WorkerFailure f;
  f.node_id = "a";
  f.hostname = "hosta";
  f.exit_code = 3;
  SummaryContext c{"job", 0, "hosta", "a", "", 0, 0, 78};
  CHECK(Has(FormatFailureSummary(f, c), "Other workers on this node (hosta): none\n"));
  c.others_exited_ok = 2;
  CHECK(Has(FormatFailureSummary(f, c), "Other workers on this node (hosta): none running (2 had exited 0)\n"));
  c.others_stopped = 5;
  CHECK(Has(FormatFailureSummary(f, c), "Other workers on this node (hosta): 5 stopped by meshrun (2 had exited 0)\n"));
  c.others_exited_ok = 0;
  CHECK(Has(FormatFailureSummary(f, c), "Other workers on this node (hosta): 5 stopped by meshrun\n"));
}
