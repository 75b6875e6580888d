// Fuzz target: the whole `meshrun` command line (launcher ParseCommandLine).
// Input: one argument per line (or NUL-separated). Parsing only resolves the
// program's path; nothing is executed. stdout (help texts) is silenced.
#include <cstdint>

#include "launcher/launch_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  meshrun::fuzz::SilenceOutput(/*also_stderr=*/false);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto args = meshrun::fuzz::SplitArgs(data, size, 32);
  auto argv = meshrun::fuzz::MakeArgv("meshrun", args);
  (void)meshrun::launcher::ParseCommandLine(static_cast<int>(argv.size()) - 1, argv.data());
  return 0;
}
