#include "tests/jepsen/serving_intervals.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "tests/jepsen/history.h"

namespace meshrun::jepsen {
namespace {

constexpr size_t kProbeFields = 4;

absl::StatusOr<Probe> ParseProbe(const std::vector<absl::string_view>& fields) {
  Probe probe;
  probe.replica = fields[0] == "-" ? "" : std::string(fields[0]);
  if (probe.replica.empty()) return absl::InvalidArgumentError("empty replica");
  if (!absl::SimpleAtoi(fields[1], &probe.send_ns)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "send_ns \"%s\" is not a decimal int64", absl::CEscape(fields[1])));
  }
  if (!absl::SimpleAtoi(fields[2], &probe.recv_ns)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "recv_ns \"%s\" is not a decimal int64", absl::CEscape(fields[2])));
  }
  if (probe.recv_ns < probe.send_ns) {
    return absl::InvalidArgumentError(
        absl::StrFormat("recv_ns %d is before send_ns %d", probe.recv_ns, probe.send_ns));
  }
  if (fields[3] != "0" && fields[3] != "1") {
    return absl::InvalidArgumentError(
        absl::StrFormat("serving \"%s\" is not 0 or 1", absl::CEscape(fields[3])));
  }
  probe.serving = fields[3] == "1";
  return probe;
}

// Splits the probes (sorted by replica, then send_ns) into streaks, appended
// to report.streaks, and lists each serving probe with its streak's index.
void FindStreaks(const std::vector<const Probe*>& sorted, ServingReport& report,
                 std::vector<std::pair<const Probe*, size_t>>& serving_probes) {
  bool in_streak = false;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const Probe& probe = *sorted[i];
    if (i > 0 && sorted[i - 1]->replica != probe.replica) in_streak = false;
    if (!probe.serving) {
      in_streak = false;
      continue;
    }
    if (!in_streak) {
      ServingStreak streak;
      streak.replica = probe.replica;
      streak.first_send_ns = probe.send_ns;
      streak.first_recv_ns = probe.recv_ns;
      report.streaks.push_back(std::move(streak));
      in_streak = true;
    }
    ServingStreak& streak = report.streaks.back();
    ++streak.probes;
    streak.last_send_ns = probe.send_ns;
    streak.last_recv_ns = probe.recv_ns;
    serving_probes.emplace_back(&probe, report.streaks.size() - 1);
  }
}

// (a): pairs of streaks of different replicas whose intervals intersect.
void FindStreakOverlaps(ServingReport& report,
                        absl::flat_hash_set<std::pair<size_t, size_t>>& reported) {
  const std::vector<ServingStreak>& streaks = report.streaks;
  for (size_t i = 0; i < streaks.size(); ++i) {
    if (!streaks[i].HasInterval()) continue;
    for (size_t j = i + 1; j < streaks.size(); ++j) {
      if (!streaks[j].HasInterval() || streaks[j].replica == streaks[i].replica) continue;
      const int64_t begin = std::max(streaks[i].first_recv_ns, streaks[j].first_recv_ns);
      const int64_t end = std::min(streaks[i].last_send_ns, streaks[j].last_send_ns);
      if (begin > end) continue;
      ServingOverlap overlap;
      overlap.kind = OverlapKind::kStreaks;
      overlap.first = streaks[i];
      overlap.second = streaks[j];
      overlap.begin_ns = begin;
      overlap.end_ns = end;
      report.overlaps.push_back(std::move(overlap));
      reported.emplace(i, j);
    }
  }
}

// (b): serving probes whose window lies inside another replica's streak
// interval, at most one per pair of streaks not already reported.
void FindProbesInStreaks(const std::vector<std::pair<const Probe*, size_t>>& serving_probes,
                         ServingReport& report,
                         absl::flat_hash_set<std::pair<size_t, size_t>>& reported) {
  const std::vector<ServingStreak>& streaks = report.streaks;
  for (const auto& [probe, own] : serving_probes) {
    for (size_t other = 0; other < streaks.size(); ++other) {
      const ServingStreak& streak = streaks[other];
      if (streak.replica == probe->replica || !streak.HasInterval()) continue;
      if (probe->send_ns < streak.first_recv_ns || probe->recv_ns > streak.last_send_ns) continue;
      if (!reported.emplace(std::min(own, other), std::max(own, other)).second) continue;
      ServingOverlap overlap;
      overlap.kind = OverlapKind::kProbeInStreak;
      overlap.first = streaks[own];
      overlap.second = streak;
      overlap.probe = *probe;
      overlap.begin_ns = probe->send_ns;
      overlap.end_ns = probe->recv_ns;
      report.overlaps.push_back(std::move(overlap));
    }
  }
}

std::string Ms(int64_t ns, int64_t origin_ns) {
  return absl::StrFormat("%.3f", static_cast<double>(ns - origin_ns) / 1e6);
}

std::string DescribeStreak(const ServingStreak& streak, int64_t origin_ns) {
  return absl::StrFormat("%s's streak of %d probes proves [%s, %s] ms", streak.replica,
                         streak.probes, Ms(streak.first_recv_ns, origin_ns),
                         Ms(streak.last_send_ns, origin_ns));
}

}  // namespace

absl::StatusOr<std::vector<Probe>> ParseProbes(absl::string_view text,
                                               absl::string_view file_name) {
  std::vector<Probe> probes;
  absl::Status status = ForEachRecord(
      text, file_name, kProbeFields,
      [&probes](const std::vector<absl::string_view>& fields, int) -> absl::Status {
        absl::StatusOr<Probe> probe = ParseProbe(fields);
        if (!probe.ok()) return probe.status();
        probes.push_back(*std::move(probe));
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  return probes;
}

absl::StatusOr<std::vector<Probe>> ReadProbeFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  return ParseProbes(*text, path);
}

ServingReport CheckServingIntervals(const std::vector<Probe>& probes) {
  ServingReport report;
  report.probes = static_cast<int>(probes.size());
  std::vector<const Probe*> sorted;
  for (const Probe& probe : probes) sorted.push_back(&probe);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Probe* a, const Probe* b) {
    return std::tie(a->replica, a->send_ns, a->recv_ns) <
           std::tie(b->replica, b->send_ns, b->recv_ns);
  });
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (i == 0 || sorted[i - 1]->replica != sorted[i]->replica) ++report.replicas;
  }
  std::vector<std::pair<const Probe*, size_t>> serving_probes;
  FindStreaks(sorted, report, serving_probes);
  absl::flat_hash_set<std::pair<size_t, size_t>> reported;  // Streak index pairs, low first.
  FindStreakOverlaps(report, reported);
  FindProbesInStreaks(serving_probes, report, reported);
  return report;
}

std::string FormatOverlap(const ServingOverlap& overlap, int64_t origin_ns) {
  if (overlap.kind == OverlapKind::kStreaks) {
    return absl::StrFormat("%s and %s both served over [%s, %s] ms (%.3f ms): %s, %s",
                           overlap.first.replica, overlap.second.replica,
                           Ms(overlap.begin_ns, origin_ns), Ms(overlap.end_ns, origin_ns),
                           static_cast<double>(overlap.end_ns - overlap.begin_ns) / 1e6,
                           DescribeStreak(overlap.first, origin_ns),
                           DescribeStreak(overlap.second, origin_ns));
  }
  return absl::StrFormat(
      "%s and %s both served at an instant within [%s, %s] ms (window %.3f ms): %s answered "
      "serving then, inside the interval of %s",
      overlap.first.replica, overlap.second.replica, Ms(overlap.begin_ns, origin_ns),
      Ms(overlap.end_ns, origin_ns), static_cast<double>(overlap.end_ns - overlap.begin_ns) / 1e6,
      overlap.first.replica, DescribeStreak(overlap.second, origin_ns));
}

int64_t EarliestSend(const std::vector<Probe>& probes) {
  if (probes.empty()) return 0;
  return std::min_element(probes.begin(), probes.end(),
                          [](const Probe& a, const Probe& b) { return a.send_ns < b.send_ns; })
      ->send_ns;
}

}  // namespace meshrun::jepsen
