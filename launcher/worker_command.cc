#include "launcher/worker_command.h"

#include <unistd.h>

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/process.h"
#include "common/env_registry.h"

namespace meshrun::launcher {

std::string DefaultPython(const std::filesystem::path& self) {
  const std::filesystem::path bin = self.parent_path();
  const std::filesystem::path env = bin.parent_path();
  std::error_code ec;
  if (!bin.empty() && (std::filesystem::is_regular_file(env / "pyvenv.cfg", ec) ||
                       std::filesystem::is_directory(env / "conda-meta", ec))) {
    for (const char* name : {"python3", "python"}) {
      const std::filesystem::path python = bin / name;
      if (::access(python.c_str(), X_OK) == 0) return python.string();
    }
  }
  return "python3";
}

absl::StatusOr<std::vector<std::string>> WorkerCommand(const WorkerProgram& p) {
  std::vector<std::string> cmd;
  // --run_path (torchrun runs the file with runpy.run_path in a child
  // interpreter): a Python script whatever its name, even with --no_python.
  const bool python = p.module || p.run_path || (!p.no_python && absl::EndsWith(p.prog, ".py"));
  if (python) {
    std::optional<std::string> interpreter_env = env::Get(env::kPythonExec);
    std::string interpreter;
    if (interpreter_env) {
      interpreter = *interpreter_env;
    } else {
      std::error_code ec;
      interpreter = DefaultPython(std::filesystem::read_symlink("/proc/self/exe", ec));
    }
    auto resolved = agent::ResolveProgram(interpreter);
    if (!resolved.ok()) {
      return absl::Status(resolved.status().code(), absl::StrCat("python interpreter: ", resolved.status().message()));
    }
    const bool module = p.module && !p.run_path;  // torchrun: --run_path wins over -m.
    if (!module && ::access(p.prog.c_str(), R_OK) != 0) {
      return absl::NotFoundError(absl::StrCat("training script '", p.prog, "' does not exist or is not readable"));
    }
    cmd = {*resolved, "-u"};
    if (module) cmd.push_back("-m");
    cmd.push_back(p.prog);
  } else {
    auto resolved = agent::ResolveProgram(p.prog);
    if (!resolved.ok()) return resolved.status();
    cmd = {*resolved};
  }
  cmd.insert(cmd.end(), p.args.begin(), p.args.end());
  return cmd;
}

}  // namespace meshrun::launcher
