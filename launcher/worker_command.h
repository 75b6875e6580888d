// The command each worker runs, from `meshrun [flags] prog [args...]`, as
// torchrun builds it: .py files and -m modules run under $PYTHON_EXEC -u
// (default: the Python environment meshrun is installed in, else python3);
// anything else runs directly.
#pragma once

#include <filesystem>
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
// a shell does). Reads $PYTHON_EXEC, else DefaultPython(/proc/self/exe);
// thread-safe.
absl::StatusOr<std::vector<std::string>> WorkerCommand(const WorkerProgram& p);

// The interpreter for Python programs when PYTHON_EXEC is not set, for a
// meshrun at `self` (its own path): a meshrun installed in a Python
// environment (pip install meshrun: <env>/bin/meshrun, with <env>/pyvenv.cfg
// for a venv or <env>/conda-meta/ for conda) uses that environment's
// interpreter, <env>/bin/python3 (else <env>/bin/python), as torchrun uses
// the interpreter it runs under; any other meshrun uses "python3", looked up
// on PATH. Reads the file system only.
std::string DefaultPython(const std::filesystem::path& self);

}  // namespace meshrun::launcher
