#include "bench/rdzv_scale/server_process.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/process.h"

namespace meshrun::bench {
namespace {

std::string Tail(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
}

// The number after `marker` on `line`, or 0.
int PortAfter(const std::string& line, const std::string& marker) {
  size_t p = line.find(marker);
  if (p == std::string::npos) return 0;
  int port = 0;
  std::string digits;
  for (size_t i = p + marker.size(); i < line.size() && isdigit(static_cast<unsigned char>(line[i])); ++i) {
    digits += line[i];
  }
  return absl::SimpleAtoi(digits, &port) ? port : 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(const std::string& meshrun_binary,
                                                                    const std::vector<std::string>& extra_args,
                                                                    const std::string& log_path,
                                                                    absl::Duration timeout) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log < 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError(absl::StrCat("cannot write ", log_path, ": ", std::strerror(errno)));
  }
  std::vector<std::string> argv = {meshrun_binary, "server", "--host", "127.0.0.1", "--port", "0",
                                   "--metrics_port", "0", "--shutdown_grace", "1"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  absl::StatusOr<agent::Child> child = agent::Spawn(argv, env, out[1], log);
  close(out[1]);
  close(log);
  if (!child.ok()) {
    close(out[0]);
    return child.status();
  }
  auto sp = std::unique_ptr<ServerProcess>(new ServerProcess());
  sp->pid_ = child->pid;
  sp->stdout_fd_ = out[0];
  sp->log_path_ = log_path;
  if (absl::Status s = agent::CheckExec(*child, meshrun_binary); !s.ok()) return s;
  // "meshrun server listening on 127.0.0.1 port P" then
  // "meshrun server: metrics on http://127.0.0.1:M/metrics".
  const absl::Time deadline = absl::Now() + timeout;
  std::string text;
  while (sp->port_ == 0 || sp->metrics_port_ == 0) {
    const int wait_ms = static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    pollfd p{sp->stdout_fd_, POLLIN, 0};
    if (wait_ms == 0 || poll(&p, 1, wait_ms) <= 0) break;
    char buf[512];
    ssize_t n = read(sp->stdout_fd_, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    sp->port_ = PortAfter(text, "listening on 127.0.0.1 port ");
    sp->metrics_port_ = PortAfter(text, "metrics on http://127.0.0.1:");
  }
  sp->stdout_text_ = text;
  if (sp->port_ == 0 || sp->metrics_port_ == 0) {
    return absl::UnavailableError(absl::StrCat("meshrun server did not print its ports within ",
                                               absl::FormatDuration(timeout), "; stdout: ", text,
                                               "; log: ", Tail(log_path)));
  }
  return sp;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(-pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

bool ServerProcess::Printed(const std::string& needle, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (int reads = 0; stdout_fd_ >= 0 && reads < 10000; ++reads) {
    if (absl::StrContains(stdout_text_, needle)) return true;
    const int wait_ms = static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    pollfd p{stdout_fd_, POLLIN, 0};
    if (poll(&p, 1, wait_ms) <= 0) break;
    char buf[512];
    ssize_t n = read(stdout_fd_, buf, sizeof buf);
    if (n <= 0) break;
    stdout_text_.append(buf, static_cast<size_t>(n));
  }
  return absl::StrContains(stdout_text_, needle);
}

void ServerProcess::Kill() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

std::string ServerProcess::endpoint() const { return absl::StrCat("127.0.0.1:", port_); }

absl::StatusOr<ProcSample> ServerProcess::Sample(bool count_sockets) const {
  ProcSample s;
  const std::string dir = absl::StrCat("/proc/", pid_);
  std::ifstream stat(dir + "/stat");
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = all.rfind(')');
  if (paren == std::string::npos) return absl::NotFoundError(absl::StrCat("server pid ", pid_, " is gone"));
  // Fields after "pid (comm)": state is field 3; utime 14, stime 15.
  std::vector<std::string> f = absl::StrSplit(all.substr(paren + 2), ' ');
  int64_t utime = 0, stime = 0;
  if (f.size() < 13 || !absl::SimpleAtoi(f[11], &utime) || !absl::SimpleAtoi(f[12], &stime)) {
    return absl::InternalError(absl::StrCat("cannot parse ", dir, "/stat"));
  }
  s.cpu_s = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::ifstream status(dir + "/status");
  for (std::string line; std::getline(status, line);) {
    auto kib = [&](const char* key, int64_t* v) {
      if (!absl::StartsWith(line, key)) return;
      std::string num;
      for (char c : line.substr(std::strlen(key))) {
        if (isdigit(static_cast<unsigned char>(c))) num += c;
      }
      (void)absl::SimpleAtoi(num, v);
    };
    kib("VmRSS:", &s.rss_kib);
    kib("VmHWM:", &s.hwm_kib);
  }
  if (DIR* d = opendir((dir + "/fd").c_str())) {
    if (count_sockets) s.sockets = 0;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      ++s.fds;
      if (!count_sockets) continue;
      char target[64];
      ssize_t n = readlink(absl::StrCat(dir, "/fd/", e->d_name).c_str(), target, sizeof target - 1);
      if (n > 0 && absl::StartsWith(absl::string_view(target, static_cast<size_t>(n)), "socket:")) ++s.sockets;
    }
    closedir(d);
  }
  return s;
}

absl::StatusOr<std::string> ServerProcess::Metrics(absl::Duration timeout) const {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(metrics_port_));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{static_cast<time_t>(absl::ToInt64Seconds(timeout)), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("metrics port ", metrics_port_, ": ", std::strerror(errno)));
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return absl::UnavailableError("metrics request not sent");
  }
  std::string resp;
  const absl::Time deadline = absl::Now() + timeout;
  char buf[16384];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      resp.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR && absl::Now() < deadline) continue;
    break;
  }
  close(fd);
  size_t body = resp.find("\r\n\r\n");
  if (!absl::StartsWith(resp, "HTTP/1.") || body == std::string::npos || !absl::StrContains(resp.substr(0, 16), " 200")) {
    return absl::UnavailableError(absl::StrCat("metrics: unexpected answer: ", resp.substr(0, 200)));
  }
  return resp.substr(body + 4);
}

std::map<std::string, double> SumByLabel(const std::string& text, const std::string& name, const std::string& label) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name)) continue;
    absl::string_view rest = line.substr(name.size());
    if (rest.empty() || (rest[0] != '{' && rest[0] != ' ')) continue;  // Another metric with this prefix.
    std::string key;
    if (rest[0] == '{') {
      size_t close_brace = rest.find('}');
      if (close_brace == absl::string_view::npos) continue;
      absl::string_view labels = rest.substr(1, close_brace - 1);
      rest = rest.substr(close_brace + 1);
      if (!label.empty()) {
        const std::string want = absl::StrCat(label, "=\"");
        size_t p = labels.find(want);
        if (p != 0 && (p == absl::string_view::npos || labels[p - 1] != ',')) continue;
        size_t v = p + want.size();
        size_t q = labels.find('"', v);
        if (q == absl::string_view::npos) continue;
        key = std::string(labels.substr(v, q - v));
      }
    }
    double value = 0;
    std::vector<absl::string_view> fields = absl::StrSplit(rest, ' ', absl::SkipEmpty());
    if (fields.empty() || !absl::SimpleAtod(fields[0], &value)) continue;
    out[key] += value;
  }
  return out;
}

}  // namespace meshrun::bench
