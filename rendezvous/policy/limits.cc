#include "rendezvous/policy/limits.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/store.h"

namespace meshrun::rendezvous {
namespace {

struct IntLimit {
  const char* name;
  int64_t ServerLimits::*field;
};
struct DurationLimit {
  const char* name;
  absl::Duration ServerLimits::*field;
};

constexpr IntLimit kIntLimits[] = {
    {"max_run_id_bytes", &ServerLimits::max_run_id_bytes},
    {"max_node_id_bytes", &ServerLimits::max_node_id_bytes},
    {"max_hostname_bytes", &ServerLimits::max_hostname_bytes},
    {"max_key_bytes", &ServerLimits::max_key_bytes},
    {"max_value_bytes", &ServerLimits::max_value_bytes},
    {"max_message_bytes", &ServerLimits::max_message_bytes},
    {"max_run_events", &ServerLimits::max_run_events},
    {"max_keys_per_run", &ServerLimits::max_keys_per_run},
    {"max_store_bytes_per_run", &ServerLimits::max_store_bytes_per_run},
    {"max_waiters_per_run", &ServerLimits::max_waiters_per_run},
    {"max_request_records_per_run", &ServerLimits::max_request_records_per_run},
    {"max_batch_items", &ServerLimits::max_batch_items},
    {"max_store_bytes", &ServerLimits::max_store_bytes},
    {"max_runs", &ServerLimits::max_runs},
    {"max_watchers_per_run", &ServerLimits::max_watchers_per_run},
    {"max_nonmember_watchers_per_run", &ServerLimits::max_nonmember_watchers_per_run},
    {"max_server_memory", &ServerLimits::max_server_memory},
    {"max_streams_per_connection", &ServerLimits::max_streams_per_connection},
    {"max_runs_per_connection", &ServerLimits::max_runs_per_connection},
    {"max_watch_queue_events", &ServerLimits::max_watch_queue_events},
    {"max_watch_queue_bytes", &ServerLimits::max_watch_queue_bytes},
    {"max_health_watchers", &ServerLimits::max_health_watchers},
    {"max_replica_groups", &ServerLimits::max_replica_groups},
    {"max_quorum_member_bytes", &ServerLimits::max_quorum_member_bytes},
    {"max_quorum_bytes", &ServerLimits::max_quorum_bytes},
    {"max_replica_group_places", &ServerLimits::max_replica_group_places},
    {"max_replica_group_jobs", &ServerLimits::max_replica_group_jobs},
    {"max_nproc", &ServerLimits::max_nproc},
    {"max_world_size", &ServerLimits::max_world_size},
    {"max_nodes", &ServerLimits::max_nodes},
    {"max_restarts", &ServerLimits::max_restarts},
    {"max_counted_peers", &ServerLimits::max_counted_peers},
    {"max_counted_nodes", &ServerLimits::max_counted_nodes},
    {"max_server_generations", &ServerLimits::max_server_generations},
};
constexpr DurationLimit kDurationLimits[] = {
    {"min_keep_alive_interval", &ServerLimits::min_keep_alive_interval},
    {"max_keep_alive_interval", &ServerLimits::max_keep_alive_interval},
    {"max_wait", &ServerLimits::max_wait},
    {"request_record_ttl", &ServerLimits::request_record_ttl},
    {"connection_idle_timeout", &ServerLimits::connection_idle_timeout},
    {"handshake_timeout", &ServerLimits::handshake_timeout},
    {"metrics_request_timeout", &ServerLimits::metrics_request_timeout},
    {"ended_run_ttl", &ServerLimits::ended_run_ttl},
    {"ended_run_room_grace", &ServerLimits::ended_run_room_grace},
    {"store_only_run_ttl", &ServerLimits::store_only_run_ttl},
    {"nodeless_run_ttl", &ServerLimits::nodeless_run_ttl},
    {"listener_check_interval", &ServerLimits::listener_check_interval},
    {"memory_release_delay", &ServerLimits::memory_release_delay},
    {"replica_group_place_hold", &ServerLimits::replica_group_place_hold},
};

}  // namespace

absl::Status SetLimit(absl::string_view name, absl::string_view value, ServerLimits* limits) {
  for (const IntLimit& l : kIntLimits) {
    if (name != l.name) continue;
    int64_t v = 0;
    if (!absl::SimpleAtoi(value, &v) || v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("server limit ", name, "=", Shown(value),
                                                     ": must be an integer > 0"));
    }
    limits->*(l.field) = v;
    return absl::OkStatus();
  }
  for (const DurationLimit& l : kDurationLimits) {
    if (name != l.name) continue;
    double s = 0;
    if (!absl::SimpleAtod(value, &s) || !(s > 0) || !std::isfinite(s) || s > 1e9) {
      return absl::InvalidArgumentError(absl::StrCat("server limit ", name, "=", Shown(value),
                                                     ": must be a number of seconds > 0"));
    }
    limits->*(l.field) = absl::Seconds(s);
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("unknown server limit '", Shown(name), "'; known: ", LimitNames()));
}

std::vector<std::string> LimitNameList() {
  std::vector<std::string> names;
  for (const IntLimit& l : kIntLimits) names.push_back(l.name);
  for (const DurationLimit& l : kDurationLimits) names.push_back(l.name);
  return names;
}

std::string LimitNames() { return absl::StrJoin(LimitNameList(), ", "); }

absl::Status CheckLength(absl::string_view what, absl::string_view value, int64_t max, absl::string_view limit,
                         bool allow_empty) {
  if (value.empty() && !allow_empty) return absl::InvalidArgumentError(absl::StrCat("empty ", what));
  if (static_cast<int64_t>(value.size()) > max) {
    return absl::InvalidArgumentError(absl::StrCat(what, " of ", value.size(), " bytes is longer than ", limit, "=",
                                                   max, ": '", Shown(value), "'"));
  }
  return absl::OkStatus();
}

absl::Status CheckJoin(const std::string& run_id, const NodeDesc& node, const RunConfig& config,
                       const ServerLimits& limits) {
  if (absl::Status s = CheckLength("run id", run_id, limits.max_run_id_bytes, "max_run_id_bytes"); !s.ok()) return s;
  if (absl::Status s = CheckLength("node id", node.node_id, limits.max_node_id_bytes, "max_node_id_bytes"); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckLength("host name", node.hostname, limits.max_hostname_bytes, "max_hostname_bytes", true);
      !s.ok()) {
    return s;
  }
  for (const auto& [what, v] : {std::pair<const char*, const std::string*>{"address", &node.addr},
                                {"local address", &node.local_addr},
                                {"dialed address", &node.dialed_addr},
                                {"role", &node.role}}) {
    if (absl::Status s = CheckLength(what, *v, limits.max_hostname_bytes, "max_hostname_bytes", true); !s.ok()) {
      return s;
    }
  }
  auto bad = [](absl::string_view field, int64_t value, absl::string_view allowed) {
    return absl::InvalidArgumentError(absl::StrCat(field, "=", value, ": allowed: ", allowed));
  };
  if (node.nproc <= 0 || node.nproc > limits.max_nproc) {
    return bad("nproc", node.nproc, absl::StrCat("1..", limits.max_nproc, " (max_nproc)"));
  }
  if (node.master_port < 1 || node.master_port > 65535) {
    return bad("master_port", node.master_port, "1..65535");
  }
  if (node.node_rank_hint < -1 || node.node_rank_hint >= limits.max_nodes) {
    return bad("node_rank", node.node_rank_hint, absl::StrCat("0..", limits.max_nodes - 1, ", or -1 for none"));
  }
  if (config.min_nodes <= 0 || config.min_nodes > config.max_nodes) {
    return absl::InvalidArgumentError(absl::StrCat("nnodes=", config.min_nodes, ":", config.max_nodes,
                                                   ": allowed: 0 < MIN <= MAX"));
  }
  if (config.max_nodes > limits.max_nodes) {
    return bad("max_nodes", config.max_nodes, absl::StrCat("1..", limits.max_nodes, " (max_nodes)"));
  }
  if (config.max_restarts < 0 || config.max_restarts > limits.max_restarts) {
    return bad("max_restarts", config.max_restarts, absl::StrCat("0..", limits.max_restarts, " (max_restarts)"));
  }
  if (config.keep_alive_interval < limits.min_keep_alive_interval ||
      config.keep_alive_interval > limits.max_keep_alive_interval) {
    return absl::InvalidArgumentError(absl::StrCat(
        "keep_alive_interval=", absl::FormatDuration(config.keep_alive_interval), ": allowed: ",
        absl::FormatDuration(limits.min_keep_alive_interval), " (min_keep_alive_interval) to ",
        absl::FormatDuration(limits.max_keep_alive_interval), " (max_keep_alive_interval)"));
  }
  if (config.keep_alive_max_attempt <= 0 || config.keep_alive_max_attempt > 1000) {
    return bad("keep_alive_max_attempt", config.keep_alive_max_attempt, "1..1000");
  }
  if (config.last_call_timeout < absl::ZeroDuration() || config.last_call_timeout > limits.max_wait) {
    return absl::InvalidArgumentError(absl::StrCat("last_call_timeout=", absl::FormatDuration(config.last_call_timeout),
                                                   ": allowed: 0..", absl::FormatDuration(limits.max_wait),
                                                   " (max_wait)"));
  }
  if (config.exit_barrier_timeout < absl::ZeroDuration() || config.exit_barrier_timeout > limits.max_wait) {
    return absl::InvalidArgumentError(absl::StrCat(
        "exit_barrier_timeout=", absl::FormatDuration(config.exit_barrier_timeout), ": allowed: 0..",
        absl::FormatDuration(limits.max_wait), " (max_wait)"));
  }
  return absl::OkStatus();
}

}  // namespace meshrun::rendezvous
