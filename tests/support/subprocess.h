// Test helper: runs a command with a time limit and captures its output.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace meshrun::testing {

struct RunResult {
  int exit_code = -1;      // Exit code, or 128+n for signal n; -1 if killed on timeout.
  bool timed_out = false;
  std::string out;         // stdout
  std::string err;         // stderr
  double seconds = 0;      // Wall time.
};

// Runs `argv` (argv[0] a path) with the current environment plus `env`
// (overrides; a value "<unset>" removes the variable). Kills the process
// group after `timeout_s` seconds. stdin is /dev/null.
RunResult RunCommand(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
                     double timeout_s = 60);

// Starts `argv` in the background in its own process group, with stdout and
// stderr going to the given files. Returns the pid.
pid_t StartCommand(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                   const std::string& out_path, const std::string& err_path);
// Waits up to `timeout_s` for `pid`; returns its exit code (128+n for a
// signal), or -1 after killing it on timeout.
int WaitCommand(pid_t pid, double timeout_s);
// SIGKILLs the process group of every command StartCommand started that is
// still running and not waited for (WaitCommand), reaps it, and returns how
// many there were. A command already reaped elsewhere is only forgotten (its
// pid may belong to another process by now). The test main calls it when
// each test case ends, so that a failed REQUIRE leaves nothing running.
// Thread-safe.
int KillStartedCommands();

// The meshrun binary under test, and paths into the source tree.
std::string MeshrunBinary();
std::string SourceDir();
std::string BinaryDir();
// An interpreter that can `import torch`, or "": $MESHRUN_TEST_PYTHON when
// set (e.g. a venv with a newer PyTorch, to run the PyTorch tests under it),
// else Debian's /usr/bin/python3.
std::string TorchPython();
// How tests/py/two_d_mesh.py builds its groups under `python` (one with
// torch): "device_mesh" where PyTorch has init_device_mesh (2.2 and later),
// else "new_group".
std::string TorchMeshApi(const std::string& python);
// Reads a whole file ("" when missing).
std::string ReadFile(const std::string& path);
// A fresh temporary folder, removed at process exit.
std::string TempDir();
// Counts lines of `text` containing `needle`.
int CountLines(const std::string& text, const std::string& needle);

}  // namespace meshrun::testing
