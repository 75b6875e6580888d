#include "rendezvous/metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace meshrun::rendezvous {

const std::vector<double>& ServerMetrics::LatencyBuckets() {
  static const std::vector<double> kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                               0.1,    0.25,  0.5,    1,     2.5,  5,     10, 30, 60, 300};
  return kBuckets;
}

std::string EscapeLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void ServerMetrics::RecordRpc(const std::string& method, const std::string& code, double seconds) {
  absl::MutexLock lock(&mu_);
  ++rpcs_[{method, code}];
  Histogram& h = latency_[method];
  const auto& bounds = LatencyBuckets();
  if (h.buckets.empty()) h.buckets.assign(bounds.size(), 0);
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (seconds <= bounds[i]) {
      ++h.buckets[i];
      break;
    }
  }
  ++h.count;
  h.sum += seconds;
}

void ServerMetrics::RecordFailure(const std::string& cause) {
  absl::MutexLock lock(&mu_);
  ++failures_[cause];
}

std::string ServerMetrics::Render(const std::vector<RunStatus>& runs, int open_watchers) const {
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  };
  family("meshrun_runs", "gauge", "Runs on this server by state.");
  std::map<std::string, int> by_state = {{"joining", 0}, {"running", 0}, {"finished", 0}, {"failed", 0}};
  for (const auto& r : runs) ++by_state[r.state];
  for (const auto& [state, n] : by_state) absl::StrAppend(&out, "meshrun_runs{state=\"", EscapeLabel(state), "\"} ", n, "\n");
  struct PerRun {
    const char* name;
    const char* help;
    int64_t (*value)(const RunStatus&);
  };
  const PerRun per_run[] = {
      {"meshrun_run_nodes", "Nodes in the run's current round (joiners while it forms).",
       [](const RunStatus& r) -> int64_t { return r.nodes; }},
      {"meshrun_run_world_size", "Workers in the run's current round.",
       [](const RunStatus& r) -> int64_t { return r.world_size; }},
      {"meshrun_run_round", "Rounds opened so far (current round + 1).",
       [](const RunStatus& r) -> int64_t { return r.round + 1; }},
      {"meshrun_run_restarts", "Failure restarts used of the job-wide budget.",
       [](const RunStatus& r) -> int64_t { return r.restart_count; }},
      {"meshrun_run_restarts_budget", "The job-wide restart budget (--max_restarts).",
       [](const RunStatus& r) -> int64_t { return r.max_restarts; }},
      {"meshrun_run_lost_nodes", "Nodes declared lost in the run so far.",
       [](const RunStatus& r) -> int64_t { return r.lost_nodes; }},
      {"meshrun_store_keys", "Keys in the run's key-value store.",
       [](const RunStatus& r) -> int64_t { return r.kv_keys; }},
      {"meshrun_store_bytes", "Bytes of keys and values in the run's key-value store.",
       [](const RunStatus& r) -> int64_t { return r.kv_bytes; }},
  };
  for (const PerRun& m : per_run) {
    family(m.name, "gauge", m.help);
    for (const auto& r : runs) absl::StrAppend(&out, m.name, "{run_id=\"", EscapeLabel(r.run_id), "\"} ", m.value(r), "\n");
  }
  family("meshrun_watchers_open", "gauge", "Open event streams (one per connected agent).");
  absl::StrAppend(&out, "meshrun_watchers_open ", open_watchers, "\n");

  absl::MutexLock lock(&mu_);
  family("meshrun_failures_total", "counter", "Worker failures accepted as a round's root cause, by cause.");
  std::map<std::string, int64_t> failures = {{"exit_code", 0}, {"signal", 0}, {"permanent", 0}};
  for (const auto& [cause, n] : failures_) failures[cause] = n;
  for (const auto& [cause, n] : failures) {
    absl::StrAppend(&out, "meshrun_failures_total{cause=\"", EscapeLabel(cause), "\"} ", n, "\n");
  }
  family("meshrun_rpcs_total", "counter", "RPCs answered, by method and gRPC status code.");
  for (const auto& [key, n] : rpcs_) {
    absl::StrAppend(&out, "meshrun_rpcs_total{method=\"", EscapeLabel(key.first), "\",code=\"", EscapeLabel(key.second),
                    "\"} ", n, "\n");
  }
  family("meshrun_rpc_duration_seconds", "histogram", "Time from an RPC's arrival to its answer, by method.");
  const auto& bounds = LatencyBuckets();
  for (const auto& [method, h] : latency_) {
    const std::string m = EscapeLabel(method);
    int64_t cumulative = 0;
    for (size_t i = 0; i < bounds.size(); ++i) {
      cumulative += h.buckets[i];
      absl::StrAppend(&out, "meshrun_rpc_duration_seconds_bucket{method=\"", m, "\",le=\"", absl::StrFormat("%g", bounds[i]),
                      "\"} ", cumulative, "\n");
    }
    absl::StrAppend(&out, "meshrun_rpc_duration_seconds_bucket{method=\"", m, "\",le=\"+Inf\"} ", h.count, "\n");
    absl::StrAppend(&out, "meshrun_rpc_duration_seconds_sum{method=\"", m, "\"} ", absl::StrFormat("%.6f", h.sum), "\n");
    absl::StrAppend(&out, "meshrun_rpc_duration_seconds_count{method=\"", m, "\"} ", h.count, "\n");
  }
  return out;
}

}  // namespace meshrun::rendezvous
