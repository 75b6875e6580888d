// bench/rdzv_scale: the results as one CSV row per run and a Markdown table
// of medians per N (meshrun, then torchrun's c10d side by side).
#pragma once

#include <string>
#include <vector>

#include "bench/rdzv_scale/driver.h"

namespace meshrun::bench {

// One torchrun c10d run (bench/rdzv_scale/c10d_rdzv.py): first
// next_rendezvous() call -> every handler's rendezvous complete.
struct C10dResult {
  int n = 0;
  int run = 0;
  bool complete = false;
  double seconds = -1;
  std::string note;  // Why not complete ("did not complete in 120 s", an error).
};

// The CSV: header then one row per run, meshrun and c10d alike (columns a
// c10d row does not have are empty). Written to `path`; false on an I/O
// error.
bool WriteCsv(const std::string& path, const std::vector<RunResult>& runs, const std::vector<C10dResult>& c10d);

// The Markdown table of medians (over the complete runs of each N), with
// the complete count and every failure's reason below it.
std::string Table(const std::vector<RunResult>& runs, const std::vector<C10dResult>& c10d);

// The workers phase of a run: server store requests per node (nodes named
// by their store proxy; "(direct)" left out).
struct WorkersStats {
  bool ran = false;
  int nodes = 0;
  double max = 0;
  double p90 = 0;  // 90% of nodes made at most this many.
  double mean = 0;
};
WorkersStats WorkersOf(const RunResult& r);

// The median of `v` (the mean of the middle two for an even count); -1
// when empty. Pure.
double Median(std::vector<double> v);

}  // namespace meshrun::bench
