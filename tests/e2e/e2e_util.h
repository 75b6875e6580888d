// Shared helpers for the end-to-end tests.
#pragma once

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "tests/support/subprocess.h"

namespace meshrun::testing {

// Writes an executable /bin/sh script into `dir` and returns its path.
inline std::string WriteScript(const std::string& dir, const std::string& name, const std::string& body) {
  std::string path = dir + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  chmod(path.c_str(), 0755);
  return path;
}

inline bool Contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// Counts occurrences of `needle` in `text`. Python's print writes the text
// and the newline separately, so lines of concurrent workers may share a
// line; occurrences are still whole.
inline int CountOccurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + needle.size())) ++n;
  return n;
}

}  // namespace meshrun::testing
