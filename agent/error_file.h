// The torchelastic error file a worker writes (TORCHELASTIC_ERROR_FILE):
// reading the message the failure summary shows. Pure parsing, no exceptions.
#pragma once

#include <string>
#include <string_view>

namespace meshrun::agent {

// The message of a torchrun-format error file's text, or "" when the text is
// not such a file: the nested {"message": {"message": ..., "extraInfo":
// {"py_callstack": ...}}} form (the call stack wins when present) and the
// flat {"message": "..."} form. Fields of unexpected types are ignored.
std::string ErrorFileMessage(std::string_view json_text);

// ErrorFileMessage of the file at `path`, or "" when it cannot be read.
std::string ReadErrorFileMessage(const std::string& path);

}  // namespace meshrun::agent
