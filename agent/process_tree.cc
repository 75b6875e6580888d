#include "agent/process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace meshrun::agent {

std::optional<ProcInfo> ParseProcStat(std::string_view stat) {
  size_t open = stat.find('(');
  size_t close = stat.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return std::nullopt;
  ProcInfo p;
  p.pid = static_cast<pid_t>(std::strtol(std::string(stat.substr(0, open)).c_str(), nullptr, 10));
  // After ") ": state(3) ppid(4) pgrp(5) session(6) tty(7) tpgid(8) flags(9)
  // minflt(10) cminflt(11) majflt(12) cmajflt(13) utime(14) stime(15)
  // cutime(16) cstime(17) priority(18) nice(19) threads(20) itreal(21) start(22).
  std::istringstream in{std::string(stat.substr(close + 1))};
  std::string fields[20];
  for (auto& f : fields) {
    if (!(in >> f)) return std::nullopt;
  }
  if (fields[0].size() != 1 || p.pid <= 0) return std::nullopt;
  p.state = fields[0][0];
  p.ppid = static_cast<pid_t>(std::strtol(fields[1].c_str(), nullptr, 10));
  p.pgid = static_cast<pid_t>(std::strtol(fields[2].c_str(), nullptr, 10));
  p.start_time = std::strtoull(fields[19].c_str(), nullptr, 10);
  return p;
}

namespace {

std::optional<ProcInfo> ReadStat(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return std::nullopt;
  std::string line;
  std::getline(f, line);
  return ParseProcStat(line);
}

// Signals `p` only if the pid still names the same process (start time).
bool SignalExact(const ProcInfo& p, int signo) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, p.pid, 0));
  if (fd < 0) {
    // No pidfd (old kernel): fall back to kill after a start-time check.
    std::optional<ProcInfo> now = ReadStat(p.pid);
    if (!now || now->start_time != p.start_time) return false;
    return ::kill(p.pid, signo) == 0;
  }
  std::optional<ProcInfo> now = ReadStat(p.pid);
  bool ok = now && now->start_time == p.start_time &&
            ::syscall(SYS_pidfd_send_signal, fd, signo, nullptr, 0) == 0;
  ::close(fd);
  return ok;
}

std::vector<ProcInfo> LiveBelow(pid_t root) {
  std::vector<ProcInfo> table = ReadProcessTable();
  std::vector<pid_t> pids = Descendants(table, root);
  std::map<pid_t, ProcInfo> by_pid;
  for (const auto& p : table) by_pid[p.pid] = p;
  std::vector<ProcInfo> out;
  for (pid_t pid : pids) out.push_back(by_pid[pid]);
  return out;
}

}  // namespace

std::vector<ProcInfo> ReadProcessTable() {
  std::vector<ProcInfo> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    if (std::optional<ProcInfo> p = ReadStat(static_cast<pid_t>(pid))) out.push_back(*p);
  }
  ::closedir(d);
  return out;
}

std::vector<pid_t> Descendants(const std::vector<ProcInfo>& table, pid_t root) {
  std::multimap<pid_t, const ProcInfo*> children;
  for (const auto& p : table) children.emplace(p.ppid, &p);
  std::vector<pid_t> out;
  std::vector<pid_t> todo = {root};
  // A pid is visited once; the table is a snapshot, so this ends.
  while (!todo.empty() && out.size() < table.size()) {
    pid_t parent = todo.back();
    todo.pop_back();
    auto [lo, hi] = children.equal_range(parent);
    for (auto it = lo; it != hi; ++it) {
      const ProcInfo& c = *it->second;
      if (c.pid == root || c.pid == parent) continue;
      todo.push_back(c.pid);
      if (c.state != 'Z') out.push_back(c.pid);
    }
  }
  return out;
}

std::vector<pid_t> GroupMembers(const std::vector<ProcInfo>& table, pid_t pgid) {
  std::vector<pid_t> out;
  for (const auto& p : table) {
    if (p.pgid == pgid && p.state != 'Z') out.push_back(p.pid);
  }
  return out;
}

int SignalDescendants(pid_t root, int signo) {
  int n = 0;
  for (const ProcInfo& p : LiveBelow(root)) n += SignalExact(p, signo) ? 1 : 0;
  return n;
}

int StopDescendants(pid_t root, int first_signal, std::chrono::milliseconds grace) {
  using Clock = std::chrono::steady_clock;
  std::vector<ProcInfo> found = LiveBelow(root);
  const int count = static_cast<int>(found.size());
  if (count == 0) return 0;
  auto poll = std::chrono::milliseconds(20);
  if (first_signal != 0) {
    for (const ProcInfo& p : found) SignalExact(p, first_signal);
    const auto deadline = Clock::now() + grace;
    while (Clock::now() < deadline && !LiveBelow(root).empty()) std::this_thread::sleep_for(poll);
  }
  const auto kill_deadline = Clock::now() + std::chrono::seconds(2);
  for (;;) {
    std::vector<ProcInfo> left = LiveBelow(root);
    if (left.empty() || Clock::now() >= kill_deadline) break;
    for (const ProcInfo& p : left) SignalExact(p, SIGKILL);
    std::this_thread::sleep_for(poll);
  }
  return count;
}

}  // namespace meshrun::agent
