// Helpers shared by the fuzz targets (tests/fuzz/).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace meshrun::fuzz {

// The input split into arguments at newlines and NUL bytes (at most
// `max_args`; the rest is dropped).
inline std::vector<std::string> SplitArgs(const uint8_t* data, size_t size, size_t max_args = 64) {
  std::vector<std::string> args;
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\n' || c == '\0') {
      args.push_back(std::move(cur));
      cur.clear();
      if (args.size() == max_args) return args;
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) args.push_back(std::move(cur));
  return args;
}

// argv for `args` behind `prog`; the strings stay owned by `args`.
inline std::vector<char*> MakeArgv(const char* prog, std::vector<std::string>& args) {
  std::vector<char*> argv{const_cast<char*>(prog)};
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

// Sends this process's stdout (and, when `also_stderr`, stderr) to
// /dev/null: help and usage texts would otherwise flood the fuzzer's log.
inline void SilenceOutput(bool also_stderr) {
  int fd = ::open("/dev/null", O_WRONLY);
  if (fd < 0) return;
  ::dup2(fd, 1);
  if (also_stderr) ::dup2(fd, 2);
  ::close(fd);
}

}  // namespace meshrun::fuzz
