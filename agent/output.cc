#include "agent/output.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/checks.h"

namespace meshrun::agent {
namespace {

constexpr size_t kMaxLine = 64 * 1024;  // A longer "line" is written out in pieces.

void WriteAll(int fd, const std::string& data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseStd(const std::string& text, int nproc, const std::string& flag) {
  auto bad = [&]() {
    return absl::InvalidArgumentError(absl::StrCat(flag, "=", text,
                                                   ": must be 0 (none), 1 (stdout), 2 (stderr), 3 (both), or a "
                                                   "per-local-rank map like 0:1,1:2"));
  };
  std::vector<int> masks(nproc, 0);
  if (text.empty()) return masks;
  int v = 0;
  if (absl::SimpleAtoi(text, &v)) {
    if (v < 0 || v > 3) return bad();
    masks.assign(nproc, v);
    return masks;
  }
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<std::string> kv = absl::StrSplit(item, ':');
    int lr = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[0], &lr) || !absl::SimpleAtoi(kv[1], &v) || v < 0 || v > 3) {
      return bad();
    }
    if (lr < 0 || lr >= nproc) {
      return absl::InvalidArgumentError(absl::StrCat(flag, "=", text, ": local rank ", lr, " is outside 0..",
                                                     nproc - 1));
    }
    masks[lr] = v;
  }
  return masks;
}

absl::StatusOr<std::string> ExpandLogLinePrefix(const std::string& tmpl, const std::string& role_name, int rank,
                                                int local_rank) {
  std::string out;
  size_t pos = 0;
  while (pos < tmpl.size()) {
    size_t at = tmpl.find("${", pos);
    if (at == std::string::npos) {
      out.append(tmpl, pos, std::string::npos);
      break;
    }
    out.append(tmpl, pos, at - pos);
    size_t close = tmpl.find('}', at);
    std::string name = close == std::string::npos ? "" : tmpl.substr(at + 2, close - at - 2);
    if (name == "role_name") {
      out += role_name;
    } else if (name == "rank") {
      out += absl::StrCat(rank);
    } else if (name == "local_rank") {
      out += absl::StrCat(local_rank);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--log-line-prefix-template='", tmpl, "': unknown macro '",
          close == std::string::npos ? tmpl.substr(at) : tmpl.substr(at, close - at + 1),
          "'; allowed: ${role_name}, ${rank}, ${local_rank}"));
    }
    pos = close + 1;
  }
  return out;
}

std::vector<std::string> ParseDuplicateFilters(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      cur += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      cur += ',';
      ++i;
    } else {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

absl::StatusOr<std::vector<bool>> ParseLocalRanksFilter(const std::string& text, int nproc) {
  if (text.empty()) return std::vector<bool>(nproc, true);
  std::vector<bool> keep(nproc, false);
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int lr = -1;
    if (!absl::SimpleAtoi(item, &lr)) {
      return absl::InvalidArgumentError(absl::StrCat("--local_ranks_filter=", text, ": '", item,
                                                     "' is not an integer (a comma-separated list of local ranks, 0..",
                                                     nproc - 1, ")"));
    }
    if (lr < 0 || lr >= nproc) {
      return absl::InvalidArgumentError(absl::StrCat("--local_ranks_filter=", text, ": '", item,
                                                     "' is not a local rank in 0..", nproc - 1));
    }
    keep[lr] = true;
  }
  return keep;
}

OutputPump::OutputPump() = default;

OutputPump::~OutputPump() {
  if (thread_.joinable()) {
    Clear(absl::Now() + absl::Milliseconds(500));
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    Wake();
    thread_.join();
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

absl::Status OutputPump::Start() {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return PosixError(errno, "eventfd");
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void OutputPump::Wake() {
  uint64_t one = 1;
  ssize_t unused = ::write(wake_fd_, &one, sizeof(one));
  (void)unused;
}

absl::StatusOr<std::pair<int, int>> OutputPump::Add(int id, const WorkerRoutes& routes) {
  auto w = std::make_unique<Worker>();
  w->prefix = routes.prefix;
  int pipes[2][2];
  for (int i = 0; i < 2; ++i) {
    if (::pipe2(pipes[i], O_CLOEXEC) != 0) return PosixError(errno, "pipe2");
    ::fcntl(pipes[i][0], F_SETFL, O_NONBLOCK);
  }
  auto open_file = [](const std::string& path) -> absl::StatusOr<int> {
    if (path.empty()) return -1;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return PosixError(errno, "open", path);
    return fd;
  };
  absl::StatusOr<int> out_file = open_file(routes.out.file);
  if (!out_file.ok()) return out_file.status();
  absl::StatusOr<int> err_file = open_file(routes.err.file);
  if (!err_file.ok()) return err_file.status();
  absl::StatusOr<int> out_dup = open_file(routes.out.duplicate_filters.empty() ? "" : routes.out.duplicate_file);
  if (!out_dup.ok()) return out_dup.status();
  absl::StatusOr<int> err_dup = open_file(routes.err.duplicate_filters.empty() ? "" : routes.err.duplicate_file);
  if (!err_dup.ok()) return err_dup.status();
  w->out = Stream{pipes[0][0], false, *out_file, routes.out.console, "", *out_dup, routes.out.duplicate_filters};
  w->err = Stream{pipes[1][0], true, *err_file, routes.err.console, "", *err_dup, routes.err.duplicate_filters};
  {
    absl::MutexLock lock(&mu_);
    workers_[id] = std::move(w);
  }
  Wake();
  return std::make_pair(pipes[0][1], pipes[1][1]);
}

void OutputPump::ConsoleWrite(Worker& w, Stream& s, absl::string_view line, absl::string_view end) {
  const int c = s.is_err ? 1 : 0;
  std::string out;
  if (Stream* other = unfinished_[c]; other != nullptr && other != &s) {
    out = "\n";  // Ends another worker's unfinished line; its rest starts a new one.
    other->cut = true;
    unfinished_[c] = nullptr;
  }
  const size_t from = std::min(s.shown, line.size());
  if (from == 0 || s.cut) out += w.prefix;
  for (char ch : line.substr(from)) {
    out += ch;
    if (ch == '\r') out += w.prefix;
  }
  absl::StrAppend(&out, end);
  WriteAll(s.is_err ? 2 : 1, out);
  s.cut = false;
  if (end.empty()) {
    s.shown = line.size();
    unfinished_[c] = &s;
  } else {
    s.shown = 0;
    if (unfinished_[c] == &s) unfinished_[c] = nullptr;
  }
}

absl::Time OutputPump::ShowUnfinished(absl::Time now) {
  absl::Time next = absl::InfiniteFuture();
  for (auto& [id, w] : workers_) {
    for (Stream* s : {&w->out, &w->err}) {
      if (!s->console || s->partial.size() <= s->shown) continue;
      const absl::Time due = s->unshown_since + kShowUnfinishedAfter;
      if (due > now) {
        next = std::min(next, due);
        continue;
      }
      ConsoleWrite(*w, *s, s->partial, "");
      s->unshown_since = absl::InfiniteFuture();
    }
  }
  return next;
}

void OutputPump::EmitLine(Worker& w, Stream& s, const std::string& line) {
  if (s.file_fd >= 0) WriteAll(s.file_fd, line + "\n");
  if (s.console) ConsoleWrite(w, s, line, "\n");
  if (s.dup_fd >= 0) {
    for (const auto& f : s.dup_filters) {
      if (absl::StrContains(line, f)) {
        WriteAll(s.dup_fd, absl::StrCat(w.prefix, line, "\n"));
        break;
      }
    }
  }
  if (s.is_err) {
    w.tail.push_back(line);
    if (w.tail.size() > kTailLines) w.tail.pop_front();
  }
}

void OutputPump::CloseStream(Worker& w, Stream& s) {
  if (!s.partial.empty()) {
    EmitLine(w, s, s.partial);
    s.partial.clear();
  }
  if (s.fd >= 0) ::close(s.fd);
  if (s.file_fd >= 0) ::close(s.file_fd);
  if (s.dup_fd >= 0) ::close(s.dup_fd);
  s.fd = -1;
  s.file_fd = -1;
  s.dup_fd = -1;
}

bool OutputPump::Drain(Worker& w, Stream& s) {
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      s.partial.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl = s.partial.find('\n'); nl != std::string::npos; nl = s.partial.find('\n', start)) {
        EmitLine(w, s, s.partial.substr(start, nl - start));
        start = nl + 1;
      }
      s.partial.erase(0, start);
      if (s.partial.size() > kMaxLine) {
        EmitLine(w, s, s.partial);
        s.partial.clear();
      }
      // Idle from now on, until more comes.
      s.unshown_since = s.partial.size() > s.shown ? absl::Now() : absl::InfiniteFuture();
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN;  // Nothing more for now; an error ends the stream.
  }
}

void OutputPump::Loop() {
  std::vector<pollfd> fds;
  std::vector<std::pair<int, bool>> owners;  // (worker id, is_err) per fd after the wake fd.
  for (;;) {
    fds.clear();
    owners.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    int timeout_ms = -1;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      const absl::Time now = absl::Now();
      if (const absl::Time due = ShowUnfinished(now); due != absl::InfiniteFuture()) {
        timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(due - now, absl::Milliseconds(1))));
      }
      for (auto& [id, w] : workers_) {
        if (w->out.fd >= 0) {
          fds.push_back({w->out.fd, POLLIN, 0});
          owners.emplace_back(id, false);
        }
        if (w->err.fd >= 0) {
          fds.push_back({w->err.fd, POLLIN, 0});
          owners.emplace_back(id, true);
        }
      }
    }
    int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) {
      uint64_t v;
      ssize_t unused = ::read(wake_fd_, &v, sizeof(v));
      (void)unused;
    }
    absl::MutexLock lock(&mu_);
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = workers_.find(owners[i - 1].first);
      if (it == workers_.end()) continue;
      Worker& w = *it->second;
      Stream& s = owners[i - 1].second ? w.err : w.out;
      if (s.fd != fds[i].fd) continue;
      if (!Drain(w, s)) CloseStream(w, s);
    }
  }
}

std::string OutputPump::StderrTail(int id, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto done = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = workers_.find(id);
    return it == workers_.end() || !Open(*it->second);
  };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  auto it = workers_.find(id);
  if (it == workers_.end()) return "";
  std::string out;
  for (const auto& line : it->second->tail) absl::StrAppend(&out, out.empty() ? "" : "\n", line);
  return out;
}

void OutputPump::Clear(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto all_closed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [id, w] : workers_) {
      if (Open(*w)) return false;
    }
    return true;
  };
  mu_.AwaitWithDeadline(absl::Condition(&all_closed), deadline);
  for (auto& [id, w] : workers_) {
    // Whatever is still buffered in a pipe held open by a leftover process.
    if (w->out.fd >= 0) Drain(*w, w->out);
    if (w->err.fd >= 0) Drain(*w, w->err);
    CloseStream(*w, w->out);
    CloseStream(*w, w->err);
  }
  workers_.clear();
  Wake();
}

}  // namespace meshrun::agent
