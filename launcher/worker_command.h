// The command each worker runs, from `meshrun [flags] prog [args...]`, as
// torchrun builds it: .py files and -m modules run under $PYTHON_EXEC -u
// (default python3); anything else runs directly.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace meshrun::launcher {

struct WorkerProgram {
  std::string prog;               // The first word after the flags.
  std::vector<std::string> args;  // The words after it.
  bool module = false;            // -m/--module: python -u -m prog.
  bool run_path = false;          // --run_path: python -u prog whatever its name; wins over module, no_python.
  bool no_python = false;         // --no_python: prog runs directly even when it ends in .py.
};

// The argv of the worker: [interpreter, "-u", ("-m"), prog, args...] for a
// Python program, else [resolved prog, args...]; the program and the
// interpreter are resolved against PATH now (agent::ResolveProgram), and a
// script must be readable. NOT_FOUND / PERMISSION_DENIED with one line:
// "python interpreter: ...", "training script 'x' does not exist or is not
// readable", or ResolveProgram's message (the launcher exits 127 on it, as
// a shell does). Reads $PYTHON_EXEC; thread-safe.
absl::StatusOr<std::vector<std::string>> WorkerCommand(const WorkerProgram& p);

}  // namespace meshrun::launcher
