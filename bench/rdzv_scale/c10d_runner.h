// bench/rdzv_scale: runs torchrun's c10d rendezvous driver
// (bench/rdzv_scale/c10d_rdzv.py, Debian's PyTorch 1.13) and reads its
// results, so both sides come from one run of rdzv_scale.
#pragma once

#include <string>
#include <vector>

#include "bench/rdzv_scale/report.h"

namespace meshrun::bench {

struct C10dOptions {
  std::vector<int> agents;            // N list.
  int runs = 0;                       // Runs per N.
  double timeout_s = 120;             // Per run; the script stops a run after it.
  std::string python = "/usr/bin/python3";  // Debian's python, which has python3-torch.
  std::string script;                 // c10d_rdzv.py
};

// Runs the script once for every N and run (its own timeout per run, plus
// a margin for the whole call), its stderr to `work_dir`/c10d.log. A run
// the script did not report is a result with complete=false and the reason.
std::vector<C10dResult> RunC10d(const C10dOptions& options, const std::string& work_dir);

}  // namespace meshrun::bench
