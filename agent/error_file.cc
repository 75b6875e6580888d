#include "agent/error_file.h"

#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

namespace meshrun::agent {
namespace {

// The string at `key` of object `o`, or "" when absent or not a string
// (json::value() would throw on a type mismatch).
std::string StringField(const nlohmann::json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : "";
}

bool PermanentField(const nlohmann::json& o) {
  auto it = o.find("permanent");
  return it != o.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

ErrorFileInfo ParseErrorFile(std::string_view json_text) {
  ErrorFileInfo info;
  nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return info;
  info.permanent = PermanentField(j);
  auto m = j.find("message");
  if (m == j.end()) return info;
  if (m->is_string()) {
    info.message = m->get<std::string>();
  } else if (m->is_object()) {
    info.permanent = info.permanent || PermanentField(*m);
    info.message = StringField(*m, "message");
    auto extra = m->find("extraInfo");
    if (extra != m->end() && extra->is_object()) {
      std::string stack = StringField(*extra, "py_callstack");
      if (!stack.empty()) info.message = stack;
    }
  }
  return info;
}

ErrorFileInfo ReadErrorFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return ParseErrorFile(text.str());
}

}  // namespace meshrun::agent
