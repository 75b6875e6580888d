#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/env_registry.h"
#include "launcher/launch_config.h"

namespace meshrun::launcher {
namespace {

int DriverGpuCount() {
  std::error_code ec;
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    (void)entry;
    ++n;
  }
  return n;
}

int UsableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace

int CountVisibleGpus() {
  const int driver = DriverGpuCount();
  std::optional<std::string> visible = env::Get(env::kCudaVisibleDevices);
  const char* raw = std::getenv("CUDA_VISIBLE_DEVICES");
  if (raw != nullptr && *raw == '\0') return 0;  // Set but empty: no device.
  if (!visible) return driver;
  int n = 0;
  for (absl::string_view entry : absl::StrSplit(*visible, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    int index = -1;
    if (absl::SimpleAtoi(entry, &index)) {
      if (index < 0 || index >= driver) break;
    } else if (!absl::StartsWith(entry, "GPU-") && !absl::StartsWith(entry, "MIG-")) {
      break;
    }
    ++n;
  }
  return std::min(n, driver);
}

absl::StatusOr<int> ResolveNprocPerNode(const std::string& text) {
  int n = 0;
  if (absl::SimpleAtoi(text, &n)) {
    if (n <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--nproc_per_node=", text, ": must be a positive integer, cpu, gpu or auto"));
    }
    return n;
  }
  if (text == "cpu") return UsableCpus();
  if (text == "gpu") {
    int gpus = CountVisibleGpus();
    if (gpus == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--nproc_per_node=gpu: no NVIDIA GPU is visible (CUDA_VISIBLE_DEVICES=",
          env::Get(env::kCudaVisibleDevices).value_or("<unset>"), ")"));
    }
    return gpus;
  }
  if (text == "auto") {
    int gpus = CountVisibleGpus();
    return gpus > 0 ? gpus : UsableCpus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--nproc_per_node=", text, ": must be a positive integer, cpu, gpu or auto"));
}

}  // namespace meshrun::launcher
