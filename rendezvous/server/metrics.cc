#include "rendezvous/server/metrics.h"

#include <map>

#include <prometheus/text_serializer.h>

namespace meshrun::rendezvous {
namespace {

prometheus::MetricFamily GaugeFamily(const std::string& name, const std::string& help) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = prometheus::MetricType::Gauge;
  return f;
}

void AddGauge(prometheus::MetricFamily* f, prometheus::ClientMetric::Label label, double value) {
  prometheus::ClientMetric m;
  if (!label.name.empty()) m.label.push_back(std::move(label));
  m.gauge.value = value;
  f->metric.push_back(std::move(m));
}

// A counter family whose values are read at scrape time (not the registry's).
prometheus::MetricFamily CounterFamily(const std::string& name, const std::string& help) {
  prometheus::MetricFamily f = GaugeFamily(name, help);
  f.type = prometheus::MetricType::Counter;
  return f;
}

void AddCounter(prometheus::MetricFamily* f, prometheus::ClientMetric::Label label, int64_t value) {
  prometheus::ClientMetric m;
  if (!label.name.empty()) m.label.push_back(std::move(label));
  m.counter.value = static_cast<double>(value);
  f->metric.push_back(std::move(m));
}

}  // namespace

ServerMetrics::ServerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      rpcs_(prometheus::BuildCounter()
                .Name("meshrun_rpcs_total")
                .Help("RPCs answered, by method and gRPC status code.")
                .Register(*registry_)),
      latency_(prometheus::BuildHistogram()
                   .Name("meshrun_rpc_duration_seconds")
                   .Help("Time from an RPC's arrival to its answer, by method.")
                   .Register(*registry_)),
      failures_(prometheus::BuildCounter()
                    .Name("meshrun_failures_total")
                    .Help("Worker failures accepted as a round's root cause, by cause.")
                    .Register(*registry_)),
      state_calls_(prometheus::BuildCounter()
                       .Name("meshrun_etcd_requests_total")
                       .Help("A replica's calls to etcd (retries and fail-over included), by kind and status code.")
                       .Register(*registry_)),
      state_latency_(prometheus::BuildHistogram()
                         .Name("meshrun_etcd_request_duration_seconds")
                         .Help("Duration of a replica's calls to etcd, retries and fail-over included, by kind.")
                         .Register(*registry_)) {
  // Every cause is shown from the start (at 0), so a rate() sees the first one.
  for (const char* cause : {"exit_code", "signal", "permanent"}) failures_.Add({{"cause", cause}});
}

const std::vector<double>& ServerMetrics::LatencyBuckets() {
  static const std::vector<double> kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                               0.1,    0.25,  0.5,    1,     2.5,  5,     10, 30, 60, 300};
  return kBuckets;
}

void ServerMetrics::RecordRpc(const std::string& method, const std::string& code, double seconds) {
  // Family::Add returns the existing series for known labels (thread-safe).
  rpcs_.Add({{"method", method}, {"code", code}}).Increment();
  latency_.Add({{"method", method}}, LatencyBuckets()).Observe(seconds);
}

void ServerMetrics::RecordStateCall(const std::string& op, const std::string& code, double seconds) {
  state_calls_.Add({{"op", op}, {"code", code}}).Increment();
  state_latency_.Add({{"op", op}}, LatencyBuckets()).Observe(seconds);
}

void ServerMetrics::RecordFailure(const std::string& cause) { failures_.Add({{"cause", cause}}).Increment(); }

std::vector<prometheus::MetricFamily> ServerMetrics::StateGauges(const std::vector<RunStatus>& runs,
                                                                 int open_watchers) {
  std::vector<prometheus::MetricFamily> out;
  prometheus::MetricFamily by_state_family = GaugeFamily("meshrun_runs", "Runs on this server by state.");
  std::map<std::string, int> by_state = {{"joining", 0}, {"running", 0}, {"finished", 0}, {"failed", 0}};
  for (const auto& r : runs) ++by_state[r.state];
  for (const auto& [state, n] : by_state) AddGauge(&by_state_family, {"state", state}, n);
  out.push_back(std::move(by_state_family));
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
      {"meshrun_run_round", "The run's current round, as meshrun status shows it (0 first).",
       [](const RunStatus& r) -> int64_t { return r.round; }},
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
    prometheus::MetricFamily f = GaugeFamily(m.name, m.help);
    for (const auto& r : runs) AddGauge(&f, {"run_id", r.run_id}, static_cast<double>(m.value(r)));
    out.push_back(std::move(f));
  }
  prometheus::MetricFamily watchers = GaugeFamily("meshrun_watchers_open", "Open event streams (one per connected agent).");
  AddGauge(&watchers, {}, open_watchers);
  out.push_back(std::move(watchers));
  return out;
}

std::vector<prometheus::MetricFamily> ServerMetrics::TrafficFamilies(const TrafficSnapshot& traffic) {
  auto add = [](prometheus::MetricFamily* f, const std::string& node, int64_t n) {
    AddCounter(f, node.empty() ? prometheus::ClientMetric::Label{} : prometheus::ClientMetric::Label{"node", node}, n);
  };
  std::vector<prometheus::MetricFamily> out;
  prometheus::MetricFamily accepted =
      CounterFamily("meshrun_connections_accepted_total", "Connections accepted (counted at their first call).");
  add(&accepted, "", traffic.connections_accepted);
  out.push_back(std::move(accepted));
  prometheus::MetricFamily requests = CounterFamily(
      "meshrun_store_requests_total", "Store requests by node (a store proxy names its node; (direct): clients that did not).");
  for (const auto& [node, n] : traffic.store_requests_by_node) add(&requests, node, n);
  out.push_back(std::move(requests));
  prometheus::MetricFamily keys = CounterFamily("meshrun_store_keys_read_total", "Keys that store requests asked to read, by node.");
  for (const auto& [node, n] : traffic.store_keys_read_by_node) add(&keys, node, n);
  out.push_back(std::move(keys));
  return out;
}

std::vector<prometheus::MetricFamily> ServerMetrics::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  if (source_.runs && source_.open_watchers) out = StateGauges(source_.runs(), source_.open_watchers());
  if (source_.traffic) {
    std::vector<prometheus::MetricFamily> traffic = TrafficFamilies(source_.traffic());
    out.insert(out.end(), std::make_move_iterator(traffic.begin()), std::make_move_iterator(traffic.end()));
  }
  if (source_.replica_leader) {
    prometheus::MetricFamily leader =
        GaugeFamily("meshrun_replica_leader", "1 while this replica leads and serves, 0 while it does not.");
    AddGauge(&leader, {}, source_.replica_leader());
    out.push_back(std::move(leader));
  }
  if (source_.replica_leads) {
    prometheus::MetricFamily leads = CounterFamily(
        "meshrun_replica_leads_total",
        "Times this replica began to lead (won the etcd election and loaded the state; a pause is not one).");
    AddCounter(&leads, {}, source_.replica_leads());
    out.push_back(std::move(leads));
  }
  if (source_.replica_leading_since) {
    prometheus::MetricFamily since = GaugeFamily("meshrun_replica_leading_since_seconds",
                                                 "When this replica began to lead, Unix seconds; 0 while it does not.");
    const absl::Time t = source_.replica_leading_since();
    AddGauge(&since, {}, t == absl::InfinitePast() ? 0.0 : absl::ToDoubleSeconds(t - absl::UnixEpoch()));
    out.push_back(std::move(since));
  }
  std::vector<prometheus::MetricFamily> registered = registry_->Collect();
  out.insert(out.end(), std::make_move_iterator(registered.begin()), std::make_move_iterator(registered.end()));
  return out;
}

std::string ServerMetrics::Render(const std::vector<RunStatus>& runs, int open_watchers) const {
  std::vector<prometheus::MetricFamily> families = StateGauges(runs, open_watchers);
  std::vector<prometheus::MetricFamily> counters = registry_->Collect();
  families.insert(families.end(), std::make_move_iterator(counters.begin()), std::make_move_iterator(counters.end()));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace meshrun::rendezvous
