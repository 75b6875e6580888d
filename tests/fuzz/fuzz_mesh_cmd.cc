// Fuzz target: `meshrun mesh` (launcher/mesh_cmd.cc): its flags, the mesh
// shape and names parsing and libmesh's MeshLayout (libmesh/layout.cc) that
// checks them and computes the groups. Input: one argument per line.
#include <cstdint>

#include "launcher/launch.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  meshrun::fuzz::SilenceOutput(/*also_stderr=*/false);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto args = meshrun::fuzz::SplitArgs(data, size, 16);
  auto argv = meshrun::fuzz::MakeArgv("mesh", args);
  (void)meshrun::launcher::MeshMain(static_cast<int>(argv.size()) - 1, argv.data());
  return 0;
}
