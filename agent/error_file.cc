#include "agent/error_file.h"

#include <fstream>

#include "nlohmann/json.hpp"

namespace meshrun::agent {

ErrorFileInfo ReadErrorFile(const std::string& path) {
  ErrorFileInfo info;
  std::ifstream in(path);
  if (!in) return info;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return info;
  auto is_true = [](const nlohmann::json& o) {
    return o.is_object() && o.contains("permanent") && o["permanent"].is_boolean() && o["permanent"].get<bool>();
  };
  info.permanent = is_true(j);
  if (!j.contains("message")) return info;
  const auto& m = j["message"];
  if (m.is_string()) {
    info.message = m.get<std::string>();
  } else if (m.is_object()) {
    info.permanent = info.permanent || is_true(m);
    if (m.contains("message") && m["message"].is_string()) info.message = m["message"].get<std::string>();
    if (m.contains("extraInfo") && m["extraInfo"].is_object() && m["extraInfo"].contains("py_callstack") &&
        m["extraInfo"]["py_callstack"].is_string()) {
      std::string stack = m["extraInfo"]["py_callstack"].get<std::string>();
      if (!stack.empty()) info.message = stack;
    }
  }
  return info;
}

}  // namespace meshrun::agent
