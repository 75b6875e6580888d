// Fuzz target: ApplyRdzvConf (launcher/rdzv_conf.cc), the --rdzv_conf
// "key=value,..." parser, on a fresh LaunchConfig each input.
#include <cstdint>
#include <string>

#include "launcher/rdzv_conf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshrun::launcher::LaunchConfig config;
  (void)meshrun::launcher::ApplyRdzvConf(std::string(reinterpret_cast<const char*>(data), size), &config);
  return 0;
}
