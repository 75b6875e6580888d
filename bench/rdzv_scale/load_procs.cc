// The load processes of one run: spawned, commanded and read (load_procs.h).
#include "bench/rdzv_scale/load_procs.h"


#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "bench/rdzv_scale/child.h"
#include "bench/rdzv_scale/kvset_latency.h"
#include "bench/rdzv_scale/server_process.h"
#include "bench/rdzv_scale/servers.h"

namespace meshrun::bench {


std::string Tail(const std::string& path, size_t bytes) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

absl::Status SpawnLoad(const DriverOptions& o, const SimConfig& c, const std::string& log, LoadProc* p) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  int logfd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (logfd < 0) {
    close(sv[0]);
    close(sv[1]);
    return absl::InternalError(absl::StrCat("cannot write ", log, ": ", std::strerror(errno)));
  }
  std::vector<std::string> args = {
      o.self_binary, "--child", "--endpoint", c.endpoint, "--run_id", c.run_id, "--first",
      absl::StrCat(c.first_index), "--count", absl::StrCat(c.count), "--nnodes", absl::StrCat(c.nnodes),
      "--nproc", absl::StrCat(c.nproc), "--keep_alive_interval",
      absl::StrCat(absl::ToDoubleSeconds(c.keep_alive_interval)), "--keep_alive_max_attempt",
      absl::StrCat(c.keep_alive_max_attempt), "--connect_concurrency", absl::StrCat(c.connect_concurrency),
      "--heartbeat_threads", absl::StrCat(c.heartbeat_threads), "--phase_timeout",
      absl::StrCat(absl::ToDoubleSeconds(c.phase_timeout)), "--workers_per_agent", absl::StrCat(c.workers_per_agent)};
  if (c.watch_first) args.push_back("--watch_first");
  if (!c.join_on_stream) args.push_back("--held_joins");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
  posix_spawn_file_actions_adddup2(&fa, logfd, 2);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  int rc = posix_spawn(&p->pid, o.self_binary.c_str(), &fa, &at, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(sv[1]);
  close(logfd);
  p->fd = sv[0];
  p->log = log;
  if (rc != 0) {
    p->pid = -1;
    return absl::InternalError(absl::StrCat("cannot start ", o.self_binary, ": ", std::strerror(rc)));
  }
  p->pgid = p->pid;
  TrackProcessGroup(p->pgid);
  return absl::OkStatus();
}

// Reads one line from each process, all bounded by `deadline`.
absl::StatusOr<std::vector<std::string>> ReadLines(std::vector<std::unique_ptr<LoadProc>>& procs, absl::Time deadline) {
  std::vector<std::string> lines(procs.size());
  std::vector<bool> have(procs.size(), false);
  size_t left = procs.size();
  while (left > 0) {
    std::vector<pollfd> fds;
    std::vector<size_t> who;
    for (size_t i = 0; i < procs.size(); ++i) {
      size_t nl = procs[i]->buffer.find('\n');
      if (!have[i] && nl != std::string::npos) {
        lines[i] = procs[i]->buffer.substr(0, nl);
        procs[i]->buffer.erase(0, nl + 1);
        have[i] = true;
        --left;
      }
      if (!have[i]) {
        fds.push_back(pollfd{procs[i]->fd, POLLIN, 0});
        who.push_back(i);
      }
    }
    if (left == 0) break;
    const int64_t wait_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (wait_ms <= 0 || poll(fds.data(), fds.size(), static_cast<int>(wait_ms)) <= 0) {
      return absl::DeadlineExceededError(absl::StrCat(left, " load processes did not answer in time; log: ",
                                                      Tail(procs[who[0]]->log)));
    }
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      char buf[4096];
      ssize_t n = read(fds[k].fd, buf, sizeof buf);
      if (n <= 0) {
        return absl::UnavailableError(absl::StrCat("load process ", procs[who[k]]->pid, " exited; log: ",
                                                   Tail(procs[who[k]]->log)));
      }
      procs[who[k]]->buffer.append(buf, static_cast<size_t>(n));
    }
  }
  return lines;
}

// Sends `command` to every load process and reads each one's answer line.
absl::StatusOr<std::vector<std::string>> CommandAll(std::vector<std::unique_ptr<LoadProc>>& procs,
                                                    const std::string& command, absl::Time deadline) {
  const std::string line = command + "\n";
  for (auto& p : procs) {
    if (write(p->fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      return absl::UnavailableError(absl::StrCat("cannot command load process ", p->pid));
    }
  }
  return ReadLines(procs, deadline);
}

// Sends "workersprep" to every load process and waits for all: each starts
// its agents' store proxies and plans its workers' requests. OK when every
// one of `expected` workers is ready.
absl::Status PrepareWorkers(std::vector<std::unique_ptr<LoadProc>>& procs, int64_t expected, absl::Duration timeout) {
  absl::StatusOr<std::vector<std::string>> lines =
      CommandAll(procs, "workersprep", absl::Now() + timeout + absl::Seconds(60));
  if (!lines.ok()) return lines.status();
  int64_t ready = 0;
  std::string error;
  for (const std::string& line : *lines) {
    ChildResult cr = ParseChildResult(line);
    if (!cr.parsed) return absl::InternalError(absl::StrCat("malformed answer from a load process: ", line.substr(0, 200)));
    ready += cr.r.ok;
    if (error.empty() && !cr.r.error.empty()) error = cr.r.error;
  }
  if (ready < expected) {
    return absl::UnavailableError(absl::StrCat("preparation: ", ready, " of ", expected, " workers ready",
                                               error.empty() ? "" : ": ", error));
  }
  return absl::OkStatus();
}


}  // namespace meshrun::bench
