// bench/rdzv_scale: the load process. The driver starts several copies of
// its own binary with --child; each runs a slice of the simulated agents
// (sim_agents.h) and takes the driver's phase commands one line at a time
// on stdin ("connect", "join", "roundclosed", "finish", "leave", "quit"),
// answering each with one line on stdout:
//   result PHASE start=S first=S end=S ok=N failed=N rank_sum=N hb_ok=N
//          hb_failed=N lost=N error=TEXT
// (S: steady-clock seconds; TEXT runs to the end of the line). EOF on
// stdin (the driver is gone) ends the process at once.
#pragma once

#include <string>

#include "bench/rdzv_scale/sim_agents.h"

namespace meshrun::bench {

// Runs the command loop; returns the process's exit code.
int ChildMain(const SimConfig& config);

// One parsed result line (see above). INVALID_ARGUMENT-free: a malformed
// line gives ok=false and its text in `error`.
struct ChildResult {
  bool parsed = false;
  std::string phase;
  PhaseResult r;
  SimCounters counters;
};
ChildResult ParseChildResult(const std::string& line);

}  // namespace meshrun::bench
