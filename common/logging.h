// Named spdlog loggers, one per subsystem: "rdzv", "agent", "mesh", "launcher".
#pragma once

#include <memory>
#include <string>

#include "spdlog/spdlog.h"

namespace meshrun {

// Returns the logger `name`, creating it on first use (stderr, colour off,
// pattern "[meshrun <name>] <level>: <msg>"). Its level comes from
// MESHRUN_LOG_LEVEL (trace|debug|info|warn|error|off; default warn, as
// torchrun's LOGLEVEL default WARNING), read once. Thread-safe.
std::shared_ptr<spdlog::logger> Logger(const std::string& name);

}  // namespace meshrun
