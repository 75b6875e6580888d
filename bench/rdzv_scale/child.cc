#include "bench/rdzv_scale/child.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace meshrun::bench {
namespace {

// Spaces become '_' so that the text stays one field.
std::string OneWord(std::string s) {
  for (char& ch : s) {
    if (ch == ' ' || ch == '\n' || ch == '\r') ch = '_';
  }
  return s;
}

std::string Format(const std::string& phase, const PhaseResult& r, const SimCounters& c) {
  std::string error = r.error;
  for (char& ch : error) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }
  return absl::StrCat("result ", phase, " start=", absl::StrFormat("%.6f", r.start),
                      " first=", absl::StrFormat("%.6f", r.first), " end=", absl::StrFormat("%.6f", r.end),
                      " ok=", r.ok, " failed=", r.failed, " rank_sum=", r.rank_sum, " hb_ok=", c.heartbeats_ok,
                      " hb_failed=", c.heartbeats_failed, " lost=", c.streams_lost, " hb_error=",
                      OneWord(c.first_heartbeat_error), " error=", error, "\n");
}

bool WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int ChildMain(const SimConfig& config) {
  // The protocol owns stdout; anything else (logs) goes to stderr.
  const int out = dup(1);
  dup2(2, 1);
  SimAgents agents(config);
  if (!WriteAll(out, "ready\n")) return 1;
  std::string line;
  char ch;
  for (;;) {
    ssize_t n = read(0, &ch, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(3);  // The driver is gone: leave at once, connections and all.
    if (ch != '\n') {
      line += ch;
      continue;
    }
    PhaseResult r;
    std::string phase = line;
    if (absl::StartsWith(line, "failover ")) {
      // "failover OLD_ENDPOINT SINCE": the leading replica was killed at SINCE.
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      double since = 0;
      phase = "failover";
      if (parts.size() == 3 && absl::SimpleAtod(parts[2], &since)) {
        r = agents.Failover(parts[1], since);
      } else {
        r.error = absl::StrCat("malformed command '", line, "'");
        r.failed = 1;
      }
    } else if (line == "connect") {
      r = agents.Connect();
    } else if (line == "join") {
      r = agents.Join();
    } else if (line == "roundclosed") {
      r = agents.RoundClosed();
    } else if (line == "workersprep") {
      r = agents.PrepareWorkers();
    } else if (line == "workers") {
      r = agents.Workers();
    } else if (line == "finish") {
      r = agents.Finish();
    } else if (line == "leave") {
      r = agents.Leave();
    } else if (line == "quit") {
      return 0;
    } else {
      r.error = absl::StrCat("unknown command '", line, "'");
      r.failed = 1;
    }
    if (!WriteAll(out, Format(phase, r, agents.counters()))) return 1;
    line.clear();
  }
}

ChildResult ParseChildResult(const std::string& line) {
  ChildResult cr;
  if (!absl::StartsWith(line, "result ")) {
    cr.r.error = line;
    return cr;
  }
  std::string head = line.substr(7);
  std::string error;
  if (size_t e = head.find(" error="); e != std::string::npos) {
    error = head.substr(e + 7);
    head.resize(e);
  }
  std::vector<std::string> parts = absl::StrSplit(head, ' ', absl::SkipEmpty());
  if (parts.empty()) return cr;
  cr.phase = parts[0];
  bool good = true;
  for (size_t i = 1; i < parts.size(); ++i) {
    std::pair<std::string, std::string> kv = absl::StrSplit(parts[i], absl::MaxSplits('=', 1));
    const std::string& k = kv.first;
    const std::string& v = kv.second;
    int64_t iv = 0;
    double dv = 0;
    if (k == "hb_error") {
      cr.counters.first_heartbeat_error = v;
      continue;
    }
    if (k == "start" || k == "first" || k == "end") {
      good &= absl::SimpleAtod(v, &dv);
      (k == "start" ? cr.r.start : k == "first" ? cr.r.first : cr.r.end) = dv;
      continue;
    }
    good &= absl::SimpleAtoi(v, &iv);
    if (k == "ok") cr.r.ok = static_cast<int>(iv);
    if (k == "failed") cr.r.failed = static_cast<int>(iv);
    if (k == "rank_sum") cr.r.rank_sum = iv;
    if (k == "hb_ok") cr.counters.heartbeats_ok = iv;
    if (k == "hb_failed") cr.counters.heartbeats_failed = iv;
    if (k == "lost") cr.counters.streams_lost = iv;
  }
  cr.r.error = error;
  cr.parsed = good;
  return cr;
}

}  // namespace meshrun::bench
