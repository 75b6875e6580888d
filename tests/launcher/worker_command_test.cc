// The worker command (launcher/worker_command.h): Python programs under
// $PYTHON_EXEC -u, others resolved on PATH, and the errors that exit 127.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "launcher/worker_command.h"

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
