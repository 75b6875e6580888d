#include "rendezvous/grpc/requests.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "rendezvous/run/replica_group_placer.h"

namespace meshrun::rendezvous::requests {
namespace {

namespace pb = ::meshrun::v1;

absl::Duration FromMs(int64_t ms) { return absl::Milliseconds(ms); }

}  // namespace

absl::Status Admit(const std::string& server_token, const pb::RunRef& run, bool need_run_id,
                   const ServerLimits& limits) {
  if (!server_token.empty() && !meshrun::TokenEquals(run.token(), server_token)) {
    return absl::UnauthenticatedError(run.token().empty() ? "this server requires a token (MESHRUN_TOKEN)"
                                                          : "wrong token (MESHRUN_TOKEN; is this port another "
                                                            "job's rendezvous server?)");
  }
  if (need_run_id) return CheckLength("run id", run.run_id(), limits.max_run_id_bytes, "max_run_id_bytes");
  return absl::OkStatus();
}

absl::StatusOr<JoinArgs> JoinFromProto(const pb::JoinRequest& req, const std::string& peer_ip,
                                       const ServerLimits& limits) {
  const pb::NodeInfo& n = req.node();
  const pb::RunConfig& c = req.config();
  JoinArgs out;
  out.node = NodeDesc{n.node_id(), n.hostname(), n.addr(), n.pid(), n.nproc(), n.node_rank_hint(),
                      n.is_endpoint_host(), n.master_port(), n.role().empty() ? "default" : n.role(),
                      n.local_addr(), n.dialed_addr()};
  // Without an explicit --local_addr, a node's address is the source of the
  // connection this server sees (docs/design.md section 4b), not its own guess.
  if (out.node.local_addr.empty() && !peer_ip.empty()) out.node.addr = peer_ip;
  out.config = RunConfig{c.min_nodes(), c.max_nodes(), FromMs(c.last_call_timeout_ms()), c.max_restarts(),
                         FromMs(c.exit_barrier_timeout_ms())};
  if (c.keep_alive_interval_ms() != 0) out.config.keep_alive_interval = FromMs(c.keep_alive_interval_ms());
  if (c.keep_alive_max_attempt() != 0) out.config.keep_alive_max_attempt = c.keep_alive_max_attempt();
  // CheckJoin bounds nproc (max_nproc), and the round bounds their sum, so
  // a world size never overflows.
  if (absl::Status s = CheckJoin(req.run().run_id(), out.node, out.config, limits); !s.ok()) return s;
  return out;
}

absl::Status CheckWatch(const pb::WatchRequest& req, const ServerLimits& limits) {
  return CheckLength("node id", req.node_id(), limits.max_node_id_bytes, "max_node_id_bytes");
}

absl::Status CheckPlaceReplicaGroup(const pb::PlaceReplicaGroupRequest& req, const ServerLimits& limits) {
  if (req.replica_groups() < 1 || req.replica_groups() > limits.max_replica_groups) {
    return absl::InvalidArgumentError(absl::StrCat("replica_groups=", req.replica_groups(), ": allowed: 1..",
                                                   limits.max_replica_groups, " (max_replica_groups)"));
  }
  if (req.min_nodes_per_group() < 1 || req.max_nodes_per_group() < req.min_nodes_per_group() ||
      req.max_nodes_per_group() > limits.max_nodes) {
    return absl::InvalidArgumentError(absl::StrCat("nodes per replica group ", req.min_nodes_per_group(), ":",
                                                   req.max_nodes_per_group(), ": allowed: 1 <= MIN <= MAX <= ",
                                                   limits.max_nodes, " (max_nodes)"));
  }
  if (absl::Status s = CheckLength("node id", req.node_id(), limits.max_node_id_bytes, "max_node_id_bytes");
      !s.ok()) {
    return s;
  }
  return CheckLength("replica group run id",
                     ReplicaGroupPlacer::GroupRunId(req.run().run_id(), req.replica_groups() - 1),
                     limits.max_run_id_bytes, "max_run_id_bytes");
}

absl::Status CheckReplicaGroupStates(const pb::ReplicaGroupStatesRequest& req, const ServerLimits& limits) {
  if (req.replica_groups() < 1 || req.replica_groups() > limits.max_replica_groups) {
    return absl::InvalidArgumentError(absl::StrCat("replica_groups=", req.replica_groups(), ": allowed: 1..",
                                                   limits.max_replica_groups, " (max_replica_groups)"));
  }
  return CheckLength("replica group run id",
                     ReplicaGroupPlacer::GroupRunId(req.run().run_id(), req.replica_groups() - 1),
                     limits.max_run_id_bytes, "max_run_id_bytes");
}

absl::StatusOr<absl::Duration> BarrierTimeout(const pb::ReportFinishedRequest& req, const ServerLimits& limits) {
  const absl::Duration timeout = FromMs(req.timeout_ms());
  if (timeout < absl::ZeroDuration() || timeout > limits.max_wait) {
    return absl::InvalidArgumentError(absl::StrCat("exit barrier timeout_ms=", req.timeout_ms(), ": allowed: 0..",
                                                   absl::ToInt64Milliseconds(limits.max_wait), " (max_wait)"));
  }
  return timeout;
}

absl::Status CheckKvBatch(const pb::KvBatchRequest& req, const ServerLimits& limits) {
  if (req.items_size() > limits.max_batch_items) {
    return absl::InvalidArgumentError(absl::StrCat("store batch of ", req.items_size(), " requests: allowed: at most ",
                                                   limits.max_batch_items, " (max_batch_items)"));
  }
  return absl::OkStatus();
}

namespace {

// A setting in ms: 0 keeps `fallback`; else 1..max ms.
absl::Status SettingMs(const char* name, int64_t ms, absl::Duration max, const char* max_name, absl::Duration* out) {
  if (ms < 0 || ms > absl::ToInt64Milliseconds(max)) {
    return absl::InvalidArgumentError(absl::StrCat("lighthouse ", name, "=", ms, ": allowed: 0 (the default) or 1..",
                                                   absl::ToInt64Milliseconds(max), " (", max_name, ")"));
  }
  if (ms > 0) *out = absl::Milliseconds(ms);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<lighthouse::LighthouseSettings> LighthouseSettingsFromProto(const pb::LighthouseSettings& s,
                                                                           const std::string& replica_id,
                                                                           int64_t member_bytes,
                                                                           const ServerLimits& limits) {
  if (replica_id.empty()) return absl::InvalidArgumentError("lighthouse call without a replica id");
  if (member_bytes > limits.max_quorum_member_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("lighthouse quorum member '", replica_id.substr(0, 64), "' of ",
                                                   member_bytes, " bytes: allowed: at most ", limits.max_quorum_member_bytes,
                                                   " (max_quorum_member_bytes)"));
  }
  if (absl::Status st = CheckLength("replica id", replica_id, limits.max_node_id_bytes, "max_node_id_bytes");
      !st.ok()) {
    return st;
  }
  lighthouse::LighthouseSettings out;
  if (s.min_replicas() < 0 || s.min_replicas() > limits.max_replica_groups) {
    return absl::InvalidArgumentError(absl::StrCat("lighthouse min_replicas=", s.min_replicas(),
                                                   ": allowed: 0 (the default, 1) or 1..", limits.max_replica_groups,
                                                   " (max_replica_groups)"));
  }
  if (s.min_replicas() > 0) out.min_replicas = s.min_replicas();
  if (absl::Status st = SettingMs("join_timeout_ms", s.join_timeout_ms(), limits.max_wait, "max_wait", &out.join_timeout);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = SettingMs("quorum_tick_ms", s.quorum_tick_ms(), absl::Seconds(60), "60 s", &out.quorum_tick);
      !st.ok()) {
    return st;
  }
  // A lighthouse looks at its groups every tick: 10 ms at the least, so no
  // caller makes the server spin.
  if (s.quorum_tick_ms() > 0 && s.quorum_tick_ms() < 10) {
    return absl::InvalidArgumentError(absl::StrCat("lighthouse quorum_tick_ms=", s.quorum_tick_ms(),
                                                   ": allowed: 0 (the default) or 10..60000"));
  }
  if (absl::Status st = SettingMs("heartbeat_timeout_ms", s.heartbeat_timeout_ms(), limits.max_wait, "max_wait",
                                  &out.heartbeat_timeout);
      !st.ok()) {
    return st;
  }
  return out;
}

}  // namespace meshrun::rendezvous::requests
