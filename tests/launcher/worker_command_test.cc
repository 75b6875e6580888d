// The worker command (launcher/worker_command.h): Python programs under
// $PYTHON_EXEC -u (default: the env meshrun is installed in, else python3),
// others resolved on PATH, and the errors that exit 127.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "launcher/worker_command.h"
#include "tests/support/subprocess.h"

using namespace meshrun::launcher;

namespace {

// Sets PYTHON_EXEC for the scope (the test binary's own value comes back).
struct PythonExec {
  std::string old;
  bool had = false;
  explicit PythonExec(const char* value) {
    if (const char* v = std::getenv("PYTHON_EXEC")) had = true, old = v;
    setenv("PYTHON_EXEC", value, 1);
  }
  ~PythonExec() { had ? setenv("PYTHON_EXEC", old.c_str(), 1) : unsetenv("PYTHON_EXEC"); }
};

}  // namespace

TEST_CASE("worker command: programs resolved on PATH, Python under PYTHON_EXEC -u", "[flags]") {
  PythonExec py("/bin/sh");  // Any executable: only resolved, never run.
  auto direct = WorkerCommand({"true", {"a", "b"}});
  REQUIRE(direct.ok());
  CHECK(direct->size() == 3);
  CHECK(direct->at(0).find("/true") != std::string::npos);
  CHECK(direct->at(1) == "a");
  auto module = WorkerCommand({"pkg.mod", {"x"}, /*module=*/true});
  REQUIRE(module.ok());
  CHECK(*module == std::vector<std::string>{"/bin/sh", "-u", "-m", "pkg.mod", "x"});
  // --run_path wins over -m and --no_python: a readable file run as a script.
  auto run_path = WorkerCommand({"/dev/null", {}, /*module=*/true, /*run_path=*/true, /*no_python=*/true});
  REQUIRE(run_path.ok());
  CHECK(*run_path == std::vector<std::string>{"/bin/sh", "-u", "/dev/null"});
  // --no_python: a .py name runs directly (and here does not exist).
  CHECK_FALSE(WorkerCommand({"/nonexistent/x.py", {}, false, false, /*no_python=*/true}).ok());
}

TEST_CASE("worker command: a missing script, program or interpreter is one line naming it", "[flags]") {
  {
    PythonExec py("/bin/sh");
    auto missing = WorkerCommand({"/nonexistent/train.py", {}});
    REQUIRE_FALSE(missing.ok());
    CHECK(std::string(missing.status().message()) ==
          "training script '/nonexistent/train.py' does not exist or is not readable");
  }
  {
    PythonExec py("no-such-python-meshrun");
    auto no_interpreter = WorkerCommand({"/dev/null", {}, false, /*run_path=*/true});
    REQUIRE_FALSE(no_interpreter.ok());
    CHECK(std::string(no_interpreter.status().message()).rfind("python interpreter: ", 0) == 0);
    CHECK(std::string(no_interpreter.status().message()).find("no-such-python-meshrun") != std::string::npos);
  }
  auto no_program = WorkerCommand({"no-such-program-meshrun", {}});
  REQUIRE_FALSE(no_program.ok());
  CHECK(std::string(no_program.status().message()).find("no-such-program-meshrun") != std::string::npos);
}

TEST_CASE("worker command: a meshrun installed in a venv or conda env runs Python with that env's interpreter", "[flags]") {
  namespace fs = std::filesystem;
  const fs::path root = meshrun::testing::TempDir();
  auto touch = [](const fs::path& p, bool executable) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "#!/bin/sh\n";
    fs::permissions(p, executable ? fs::perms::owner_all : fs::perms::owner_read | fs::perms::owner_write);
  };
  // A venv: <env>/pyvenv.cfg, <env>/bin/{meshrun,python3}.
  const fs::path venv = root / "venv";
  touch(venv / "bin/meshrun", true);
  touch(venv / "bin/python3", true);
  touch(venv / "pyvenv.cfg", false);
  CHECK(DefaultPython(venv / "bin/meshrun") == (venv / "bin/python3").string());
  // A conda env: <env>/conda-meta/, and only bin/python.
  const fs::path conda = root / "conda";
  touch(conda / "bin/meshrun", true);
  touch(conda / "bin/python", true);
  fs::create_directories(conda / "conda-meta");
  CHECK(DefaultPython(conda / "bin/meshrun") == (conda / "bin/python").string());
  // Not an environment (a build tree, /usr/bin): python3 from PATH, even
  // with a python3 beside meshrun.
  const fs::path plain = root / "plain";
  touch(plain / "bin/meshrun", true);
  touch(plain / "bin/python3", true);
  CHECK(DefaultPython(plain / "bin/meshrun") == "python3");
  // An environment without an executable interpreter: python3 from PATH.
  const fs::path broken = root / "broken";
  touch(broken / "bin/meshrun", true);
  touch(broken / "bin/python3", false);
  touch(broken / "pyvenv.cfg", false);
  CHECK(DefaultPython(broken / "bin/meshrun") == "python3");
  CHECK(DefaultPython("meshrun") == "python3");
  CHECK(DefaultPython("") == "python3");
}

TEST_CASE("worker command: PYTHON_EXEC wins, and without it this test binary (no env) uses python3 from PATH", "[flags]") {
  {
    PythonExec py("/bin/sh");
    auto set = WorkerCommand({"/dev/null", {}, false, /*run_path=*/true});
    REQUIRE(set.ok());
    CHECK(set->at(0) == "/bin/sh");
  }
  const char* old = std::getenv("PYTHON_EXEC");
  const std::string saved = old ? old : "";
  unsetenv("PYTHON_EXEC");
  auto unset = WorkerCommand({"/dev/null", {}, false, /*run_path=*/true});
  if (old) setenv("PYTHON_EXEC", saved.c_str(), 1);
  REQUIRE(unset.ok());
  CHECK(std::filesystem::path(unset->at(0)).filename() == "python3");
}
