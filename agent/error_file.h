// Reading a worker's error file (TORCHELASTIC_ERROR_FILE, torchrun's
// @record format) after it failed. Pure parsing, no exceptions: a worker's
// file of any shape must not stop the agent that has to stop the others.
#pragma once

#include <string>
#include <string_view>

namespace meshrun::agent {

struct ErrorFileInfo {
  // The message: the Python traceback (extraInfo.py_callstack) of the
  // nested {"message": {"message": ..., "extraInfo": {...}}} form, or the
  // plain "message" of either form. "" when absent.
  std::string message;
  // meshrun's extension: `"permanent": true` at the top level (or inside the
  // nested "message" object) marks the failure as not worth a restart.
  bool permanent = false;
};

// Parses an error file's text. Text that is not such a file, and fields of
// unexpected types, give empty fields. Pure function.
ErrorFileInfo ParseErrorFile(std::string_view json_text);

// Parses the error file at `path`. A missing, unreadable or malformed file
// gives an empty ErrorFileInfo (no error: most workers write none).
// Thread-safe.
ErrorFileInfo ReadErrorFile(const std::string& path);

}  // namespace meshrun::agent
