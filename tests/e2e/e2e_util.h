// Shared helpers for the end-to-end tests.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/time/clock.h"
#include "tests/support/subprocess.h"

namespace meshrun::testing {

// Latency bounds (how soon something happens, in milliseconds or a few
// seconds) speak of the product in its plain build. The sanitizer build
// (scripts/sanitize.sh: ASan and UBSan, several times slower) prints the
// figures but is not held to them, as the memory bounds are not (kRssBounds
// in hostile_test.cc and long_lived_test.cc). Bounds that only say "it did
// not hang" (tens of seconds) hold in every build.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kTimingBounds = false;
#else
inline constexpr bool kTimingBounds = true;
#endif

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

// Polls `pred` every `poll_s` seconds until it holds or `seconds` have
// passed; returns its last value (bounded: every test wait goes through a
// deadline).
template <typename P>
bool WaitFor(P pred, double seconds, double poll_s = 0.05) {
  const absl::Time deadline = absl::Now() + absl::Seconds(seconds);
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Seconds(poll_s));
  }
  return pred();
}

// Whether process `pid` exists and is not a zombie.
inline bool Alive(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  return !stat.empty() && stat.find(") Z ") == std::string::npos;
}

// A TCP port free on 127.0.0.1 right now, for a multi-node test to hand to
// every node.
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// One meshrun process standing for a node, with its output in files.
struct NodeProc {
  pid_t pid = -1;
  std::string out_path, err_path;
  int code = -2;
  std::string out() const { return ReadFile(out_path); }
  std::string err() const { return ReadFile(err_path); }
};

inline NodeProc StartNode(const std::string& dir, const std::string& name, std::vector<std::string> args,
                          const std::map<std::string, std::string>& env = {}) {
  NodeProc n;
  n.out_path = dir + "/" + name + ".out";
  n.err_path = dir + "/" + name + ".err";
  args.insert(args.begin(), MeshrunBinary());
  n.pid = StartCommand(args, env, n.out_path, n.err_path);
  return n;
}

// Starts node A (advertising 127.0.0.1, so it sorts first: node rank 0) and,
// `gap_us` later, node B (127.0.0.2), both with `flags` then `prog`.
inline std::pair<NodeProc, NodeProc> StartTwoNodes(const std::string& dir, const std::vector<std::string>& flags,
                                                   const std::string& prog, useconds_t gap_us = 200000) {
  auto args = [&](const std::string& addr) {
    std::vector<std::string> a = flags;
    a.push_back("--local_addr=" + addr);
    a.push_back(prog);
    return a;
  };
  NodeProc a = StartNode(dir, "a", args("127.0.0.1"));
  usleep(gap_us);
  NodeProc b = StartNode(dir, "b", args("127.0.0.2"));
  return {a, b};
}

// Waits until node `n` has printed the join progress of run `run_id`
// ("meshrun: 1/2 nodes joined run '<id>', ..."): the server has its join.
// True when it did within `seconds`.
inline bool WaitJoined(const NodeProc& n, const std::string& run_id, double seconds) {
  return WaitFor([&] { return Contains(n.err(), " nodes joined run '" + run_id + "'"); }, seconds);
}

// Waits for both nodes (sets their exit codes).
inline void WaitBoth(NodeProc& a, NodeProc& b, double timeout_s = 60) {
  a.code = WaitCommand(a.pid, timeout_s);
  b.code = WaitCommand(b.pid, timeout_s);
}

// An agent's flags for a `meshrun server` daemon on 127.0.0.1:`port`, run
// `run_id` (a client only: is_host=0), then `extra`.
inline std::vector<std::string> DaemonClientFlags(int port, const std::string& run_id,
                                                  const std::vector<std::string>& extra = {}) {
  std::vector<std::string> f = {"--rdzv_endpoint=127.0.0.1:" + std::to_string(port), "--rdzv_id=" + run_id,
                                "--rdzv_conf=is_host=0"};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

// A `meshrun server` daemon on 127.0.0.1 and a port of its choosing,
// stopped (SIGTERM, then waited for) when it goes out of scope.
struct Daemon {
  pid_t pid = -1;
  int port = 0;
  std::string err_path;  // Its standard error.
  ~Daemon() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      kill(pid, SIGCONT);  // A daemon a test froze (SIGSTOP) too.
      WaitCommand(pid, 10);
    }
  }
  std::string err() const { return ReadFile(err_path); }
  // Resident memory, MiB.
  double RssMiB() const {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
    }
    return 0;
  }
  // User plus system CPU seconds so far.
  double CpuSeconds() const {
    std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    size_t p = stat.rfind(')');
    if (p == std::string::npos) return 0;
    std::istringstream in(stat.substr(p + 2));
    std::string field;
    double ticks = 0;
    for (int i = 3; i <= 15 && in >> field; ++i) {
      if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
    }
    return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
};

// Starts `d`, `meshrun server` on 127.0.0.1 and a free port, with `env`,
// the flags `extra`, and run through `prefix` when given (e.g. {"/bin/sh",
// "-c", "ulimit -n 256 && exec \"$0\" \"$@\""}: the command must exec
// meshrun so that d.pid is the server); its output in `dir`. REQUIREs that
// it reports its port within 10 s.
inline void StartDaemon(Daemon& d, const std::string& dir, const std::map<std::string, std::string>& env = {},
                        const std::vector<std::string>& extra = {}, const std::vector<std::string>& prefix = {}) {
  std::string port_file = dir + "/port";
  std::vector<std::string> argv = prefix;
  argv.insert(argv.end(), {MeshrunBinary(), "server", "--host", "127.0.0.1", "--port", "0", "--port_file", port_file});
  argv.insert(argv.end(), extra.begin(), extra.end());
  d.err_path = dir + "/server.err";
  d.pid = StartCommand(argv, env, dir + "/server.out", d.err_path);
  for (int i = 0; i < 500 && ReadFile(port_file).empty(); ++i) usleep(20000);
  std::string p = ReadFile(port_file);
  REQUIRE_FALSE(p.empty());
  d.port = std::stoi(p);
  REQUIRE(d.port > 0);
}

}  // namespace meshrun::testing
