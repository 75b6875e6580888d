#include "bench/rdzv_scale/c10d_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "agent/process.h"
#include "bench/rdzv_scale/driver.h"

namespace meshrun::bench {
namespace {

// "RESULT n=64 run=1 complete=1 seconds=1.2345 note=TEXT"
bool ParseResult(const std::string& line, C10dResult* r) {
  if (!absl::StartsWith(line, "RESULT ")) return false;
  std::string head = line.substr(7);
  if (size_t e = head.find(" note="); e != std::string::npos) {
    r->note = head.substr(e + 6);
    head.resize(e);
  }
  int complete = 0;
  for (absl::string_view kv : absl::StrSplit(head, ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first == "n" && !absl::SimpleAtoi(p.second, &r->n)) return false;
    if (p.first == "run" && !absl::SimpleAtoi(p.second, &r->run)) return false;
    if (p.first == "complete" && !absl::SimpleAtoi(p.second, &complete)) return false;
    if (p.first == "seconds" && !absl::SimpleAtod(p.second, &r->seconds)) return false;
  }
  r->complete = complete == 1;
  if (!r->complete) r->seconds = -1;
  return r->n > 0;
}

}  // namespace

std::vector<C10dResult> RunC10d(const C10dOptions& o, const std::string& work_dir) {
  std::vector<C10dResult> out;
  auto fail_all = [&](const std::string& why) {
    for (int n : o.agents) {
      for (int run = 1; run <= o.runs; ++run) out.push_back(C10dResult{n, run, false, -1, why});
    }
    return out;
  };
  std::vector<std::string> agents;
  for (int n : o.agents) agents.push_back(absl::StrCat(n));
  std::vector<std::string> argv = {o.python, o.script, "--agents", absl::StrJoin(agents, ","), "--runs",
                                   absl::StrCat(o.runs), "--timeout", absl::StrCat(o.timeout_s)};
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return fail_all(absl::StrCat("pipe: ", std::strerror(errno)));
  const std::string log = work_dir + "/c10d.log";
  int logfd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  absl::StatusOr<agent::Child> child = agent::Spawn(argv, env, pipefd[1], logfd);
  close(pipefd[1]);
  if (logfd >= 0) close(logfd);
  if (!child.ok()) {
    close(pipefd[0]);
    return fail_all(std::string(child.status().message()));
  }
  if (absl::Status s = agent::CheckExec(*child, o.python); !s.ok()) {
    close(pipefd[0]);
    waitpid(child->pid, nullptr, 0);
    return fail_all(std::string(s.message()));
  }
  TrackProcessGroup(child->pid);
  std::fprintf(stderr, "rdzv_scale: torchrun c10d: %s\n", absl::StrJoin(argv, " ").c_str());
  // Each run stops itself at its timeout; the whole call gets that plus
  // start-up time per run.
  const int total_runs = static_cast<int>(o.agents.size()) * o.runs;
  const absl::Time deadline = absl::Now() + absl::Seconds((o.timeout_s + 60) * total_runs);
  std::string buffer;
  for (;;) {
    const int64_t wait_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    pollfd p{pipefd[0], POLLIN, 0};
    if (wait_ms <= 0 || poll(&p, 1, static_cast<int>(std::min<int64_t>(wait_ms, 1 << 30))) <= 0) break;
    char buf[1024];
    ssize_t n = read(pipefd[0], buf, sizeof buf);
    if (n <= 0) break;
    buffer.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = buffer.find('\n')) != std::string::npos; buffer.erase(0, nl + 1)) {
      C10dResult r;
      if (ParseResult(buffer.substr(0, nl), &r)) {
        std::fprintf(stderr, "rdzv_scale: torchrun c10d N=%d run %d: %s\n", r.n, r.run,
                     r.complete ? absl::StrCat(r.seconds, " s").c_str() : r.note.c_str());
        out.push_back(r);
      }
    }
  }
  close(pipefd[0]);
  kill(-child->pid, SIGKILL);
  waitpid(child->pid, nullptr, 0);
  UntrackProcessGroup(child->pid);
  // Runs the script never reported.
  std::map<std::pair<int, int>, bool> seen;
  for (const auto& r : out) seen[{r.n, r.run}] = true;
  for (int n : o.agents) {
    for (int run = 1; run <= o.runs; ++run) {
      if (!seen.count({n, run})) {
        out.push_back(C10dResult{n, run, false, -1, absl::StrCat("not reported by the c10d driver (see ", log, ")")});
      }
    }
  }
  return out;
}

}  // namespace meshrun::bench
