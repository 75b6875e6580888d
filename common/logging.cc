#include "common/logging.h"

#include <cstdlib>
#include <mutex>

#include "spdlog/sinks/stdout_sinks.h"

namespace meshrun {
namespace {

spdlog::level::level_enum LevelFromEnv() {
  const char* v = std::getenv("MESHRUN_LOG_LEVEL");
  if (v == nullptr || *v == '\0') return spdlog::level::warn;
  return spdlog::level::from_str(v);
}

}  // namespace

std::shared_ptr<spdlog::logger> Logger(const std::string& name) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (auto existing = spdlog::get(name)) return existing;
  auto logger = std::make_shared<spdlog::logger>(
      name, std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("[meshrun " + name + "] %l: %v");
  static const spdlog::level::level_enum level = LevelFromEnv();
  logger->set_level(level);
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace meshrun
