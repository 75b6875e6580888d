// The rendezvous server's metrics, rendered in Prometheus' text exposition
// format (version 0.0.4) for `GET /metrics`. Pure domain: no gRPC, no HTTP.
//
// Debian 12 has no prometheus-cpp package, so the few metric kinds needed
// (labelled counters, one histogram family, gauges computed at scrape time)
// are written here.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/types.h"

namespace meshrun::rendezvous {

class ServerMetrics {
 public:
  // Upper bounds (seconds) of the RPC latency histogram's buckets.
  static const std::vector<double>& LatencyBuckets();

  // One finished RPC: its method ("Join"), status code name ("OK",
  // "UNAUTHENTICATED", ...) and duration in seconds (a parked Join or store
  // wait counts its whole wait). Thread-safe.
  void RecordRpc(const std::string& method, const std::string& code, double seconds);

  // A failure the server accepted as a round's root cause, by cause:
  // "exit_code", "signal" or "permanent". Thread-safe.
  void RecordFailure(const std::string& cause);

  // The text for a scrape: the counters above plus gauges from `runs` (the
  // registry's status now) and `open_watchers` (agents' event streams):
  //   meshrun_runs{state}                 runs by state
  //   meshrun_run_nodes{run_id}           nodes of the current round
  //   meshrun_run_world_size{run_id}
  //   meshrun_run_round{run_id}           rounds opened so far = round + 1
  //   meshrun_run_restarts{run_id}        restarts used (and _budget)
  //   meshrun_run_lost_nodes{run_id}
  //   meshrun_store_keys{run_id}, meshrun_store_bytes{run_id}
  //   meshrun_watchers_open
  //   meshrun_failures_total{cause}
  //   meshrun_rpcs_total{method,code}
  //   meshrun_rpc_duration_seconds{method} (histogram)
  // Thread-safe.
  std::string Render(const std::vector<RunStatus>& runs, int open_watchers) const;

 private:
  struct Histogram {
    std::vector<int64_t> buckets;  // Cumulative at render time; per bucket here.
    int64_t count = 0;
    double sum = 0;
  };
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> rpcs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Histogram> latency_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> failures_ ABSL_GUARDED_BY(mu_);
};

// A label value escaped for the text format (backslash, quote, newline).
std::string EscapeLabel(const std::string& value);

}  // namespace meshrun::rendezvous
