// The rendezvous server's metrics, kept in a prometheus-cpp registry and
// rendered in Prometheus' text exposition format (version 0.0.4). Pure
// domain: no gRPC, no HTTP (metrics_exposer.h serves them).
//
//   meshrun_runs{state}                   runs by state (joining, running, finished, failed)
//   meshrun_run_nodes{run_id}             nodes of the current round (joiners while it forms)
//   meshrun_run_world_size{run_id}
//   meshrun_run_round{run_id}             the current round, as meshrun status shows it (0 first)
//   meshrun_run_restarts{run_id}          restarts used (and meshrun_run_restarts_budget)
//   meshrun_run_lost_nodes{run_id}
//   meshrun_store_keys{run_id}, meshrun_store_bytes{run_id}
//   meshrun_watchers_open                 agents' open event streams
//   meshrun_failures_total{cause}         root-cause failures: exit_code, signal, permanent
//   meshrun_rpcs_total{code,method}       RPCs answered
//   meshrun_rpc_duration_seconds{method}  histogram, arrival to answer
//   meshrun_connections_accepted_total    connections, counted by the server (traffic_counters.h)
//   meshrun_store_requests_total{node}    store requests by node ("(direct)": no store proxy)
//   meshrun_store_keys_read_total{node}   keys those requests asked to read
//   meshrun_replica_leader                a replica (meshrun server --state): 1 while it leads
//                                         and serves, 0 otherwise; absent for a single server
//   meshrun_etcd_requests_total{op,code}  a replica's calls to etcd, by kind and outcome
//   meshrun_etcd_request_duration_seconds{op}  histogram, a call with its retries
//   meshrun_replica_leads_total           a replica: times it began to lead (won the etcd
//                                         election and loaded the state; a pause is not one);
//                                         the failovers of a deployment are the sum over its
//                                         replicas less 1
//   meshrun_replica_leading_since_seconds a replica: when it began to lead, Unix seconds; 0
//                                         while it does not lead
// The per-run gauges are computed at scrape time from the registry's status
// (a Collectable), the counters and the histogram are prometheus-cpp's.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/time/time.h"
#include "proto/types.h"
#include "rendezvous/server/traffic_counters.h"

namespace meshrun::rendezvous {

class ServerMetrics : public prometheus::Collectable {
 public:
  // What a scrape reads besides the registry: every run's status, the
  // number of open event streams and the traffic counters. All must be
  // thread-safe; `traffic` may be empty.
  struct Source {
    std::function<std::vector<RunStatus>()> runs;
    std::function<int()> open_watchers;
    std::function<TrafficSnapshot()> traffic;
    // 1 while this replica leads and serves, 0 while not; empty for a
    // single server.
    std::function<int()> replica_leader;
    // Times this replica began to lead, and since when it leads
    // (absl::InfinitePast() while it does not); empty for a single server.
    std::function<int64_t()> replica_leads;
    std::function<absl::Time()> replica_leading_since;
  };

  ServerMetrics();

  // Upper bounds (seconds) of the RPC latency histogram's buckets.
  static const std::vector<double>& LatencyBuckets();

  // One finished RPC: its method ("Join"), status code name ("OK",
  // "UNAUTHENTICATED", ...) and duration in seconds (a parked Join or store
  // wait counts its whole wait). Thread-safe.
  void RecordRpc(const std::string& method, const std::string& code, double seconds);

  // A failure the server accepted as a round's root cause, by cause:
  // "exit_code", "signal" or "permanent". Thread-safe.
  void RecordFailure(const std::string& cause);

  // One call of a replica to etcd (rendezvous/state/etcd/client: its
  // retries and fail-over between members included): its kind ("Range",
  // "Put", "Txn", "LeaseKeepAlive", ...), status code name and duration in
  // seconds. Thread-safe.
  void RecordStateCall(const std::string& op, const std::string& code, double seconds);

  // Sets what Collect() reads for the gauges; before it is set (or when a
  // function is empty) they are left out. Call before serving scrapes.
  void SetSource(Source source) { source_ = std::move(source); }

  // prometheus::Collectable: counters, histogram and the gauges of the
  // source, for prometheus::Exposer. Thread-safe.
  std::vector<prometheus::MetricFamily> Collect() const override;

  // The text of a scrape with the gauges computed from `runs` and
  // `open_watchers` instead of the source. Thread-safe.
  std::string Render(const std::vector<RunStatus>& runs, int open_watchers) const;

  // The scrape-time gauges alone (runs by state, per-run gauges, open
  // watchers) as metric families. Pure.
  static std::vector<prometheus::MetricFamily> StateGauges(const std::vector<RunStatus>& runs, int open_watchers);

  // The traffic counters (connections accepted, store requests and keys
  // read by node) as counter families. Pure.
  static std::vector<prometheus::MetricFamily> TrafficFamilies(const TrafficSnapshot& traffic);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Family<prometheus::Counter>& failures_;
  prometheus::Family<prometheus::Counter>& state_calls_;
  prometheus::Family<prometheus::Histogram>& state_latency_;
  Source source_;
};

}  // namespace meshrun::rendezvous
