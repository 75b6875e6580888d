// Fuzz target: the torchelastic error-file reader (agent/error_file.h): a
// worker writes that file, the agent reads it into the failure summary.
#include <cstdint>
#include <string_view>

#include "agent/error_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)meshrun::agent::ParseErrorFile(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
