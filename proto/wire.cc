#include "proto/wire.h"
#include "common/setting.h"
#include "common/stale.h"
#include "common/standby.h"

#include "proto/malformed.h"

#include <sys/socket.h>

#include "common/net.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace meshrun::rendezvous::wire {

absl::Status CheckWellFormed(const google::protobuf::Message& req) {
  const std::optional<int64_t> bytes = meshrun::wire::MalformedBytes(req);
  if (!bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("malformed request: its ", *bytes, " bytes do not parse as ",
                                                 req.GetDescriptor()->full_name()));
}

namespace pb = ::meshrun::v1;

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  if (std::string leader; IsStandby(s, &leader)) {
    return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()), StandbyDetail(leader));
  }
  if (IsStaleStatus(s)) {
    return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()), std::string(kStaleDetail));
  }
  if (std::optional<std::string> setting = SettingOf(s)) {
    return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()), SettingDetail(*setting));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

namespace {
// The payloads that status details stand for (ToGrpc's, reversed).
void AddDetailPayloads(const std::string& details, absl::Status* out) {
  // A standby's refusal keeps who leads (common/standby.h).
  if (std::string leader; ParseStandbyDetail(details, &leader)) {
    out->SetPayload(kStandbyPayloadUrl, absl::Cord(leader));
  }
  // A node declared lost (common/stale.h).
  if (IsStaleDetail(details)) out->SetPayload(kStalePayloadUrl, absl::Cord("1"));
  // The run's setting a refusal is about (common/setting.h).
  if (std::optional<std::string> setting = ParseSettingDetail(details)) {
    out->SetPayload(kSettingPayloadUrl, absl::Cord(*setting));
  }
}
}  // namespace

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat(what, ": ", s.error_message()));
  AddDetailPayloads(s.error_details(), &out);
  return out;
}

void ToProto(const WorkerFailure& f, pb::WorkerFailure* out) {
  out->set_node_id(f.node_id);
  out->set_hostname(f.hostname);
  out->set_node_rank(f.node_rank);
  out->set_rank(f.rank);
  out->set_local_rank(f.local_rank);
  out->set_exit_code(f.exit_code);
  out->set_signal(f.signal);
  out->set_message(f.message);
  out->set_round(f.round);
  out->set_permanent(f.permanent);
  out->set_timestamp_ms(f.time == absl::Time() ? 0 : absl::ToUnixMillis(f.time));
}

WorkerFailure FromProto(const pb::WorkerFailure& f) {
  WorkerFailure out;
  out.node_id = f.node_id();
  out.hostname = f.hostname();
  out.node_rank = f.node_rank();
  out.rank = f.rank();
  out.local_rank = f.local_rank();
  out.exit_code = f.exit_code();
  out.signal = f.signal();
  out.message = f.message();
  out.round = f.round();
  out.permanent = f.permanent();
  if (f.timestamp_ms() != 0) out.time = absl::FromUnixMillis(f.timestamp_ms());
  return out;
}

void ToProto(const Assignment& a, pb::Assignment* out) {
  out->set_round(a.round);
  out->set_node_rank(a.node_rank);
  out->set_node_count(a.node_count);
  out->set_rank_base(a.rank_base);
  out->set_world_size(a.world_size);
  out->set_master_addr(a.master_addr);
  out->set_master_port(a.master_port);
  out->set_restart_count(a.restart_count);
  out->set_max_restarts(a.max_restarts);
  out->set_role_rank_base(a.role_rank_base);
  out->set_role_world_size(a.role_world_size);
  out->set_node_addr(a.node_addr);
  out->set_session(a.session);
}

Assignment FromProto(const pb::Assignment& a) {
  Assignment out;
  out.round = a.round();
  out.node_rank = a.node_rank();
  out.node_count = a.node_count();
  out.rank_base = a.rank_base();
  out.world_size = a.world_size();
  out.master_addr = a.master_addr();
  out.master_port = a.master_port();
  out.restart_count = a.restart_count();
  out.max_restarts = a.max_restarts();
  out.role_rank_base = a.role_rank_base();
  out.role_world_size = a.role_world_size();
  out.node_addr = a.node_addr();
  out.session = a.session();
  return out;
}

namespace {

struct KindPair {
  RunEvent::Kind domain;
  pb::RunEvent::Kind wire;
};
constexpr KindPair kKinds[] = {
    {RunEvent::Kind::kRoundClosed, pb::RunEvent::ROUND_CLOSED},
    {RunEvent::Kind::kRestart, pb::RunEvent::RESTART},
    {RunEvent::Kind::kNodeLost, pb::RunEvent::NODE_LOST},
    {RunEvent::Kind::kNodeWaiting, pb::RunEvent::NODE_WAITING},
    {RunEvent::Kind::kRunFinished, pb::RunEvent::RUN_FINISHED},
    {RunEvent::Kind::kRunFailed, pb::RunEvent::RUN_FAILED},
    {RunEvent::Kind::kJoinProgress, pb::RunEvent::JOIN_PROGRESS},
    {RunEvent::Kind::kSession, pb::RunEvent::SESSION},
    {RunEvent::Kind::kJoinAnswered, pb::RunEvent::JOIN_ANSWERED},
};

}  // namespace

pb::RunEvent ToProto(const RunEvent& e) {
  pb::RunEvent out;
  for (const auto& k : kKinds) {
    if (k.domain == e.kind) out.set_kind(k.wire);
  }
  out.set_round(e.round);
  out.set_node_id(e.node_id);
  if (e.root_cause) ToProto(*e.root_cause, out.mutable_root_cause());
  out.set_restart_count(e.restart_count);
  out.set_membership_change(e.membership_change);
  out.set_joined(e.joined);
  out.set_min_nodes(e.min_nodes);
  out.set_max_nodes(e.max_nodes);
  out.set_session(e.session);
  if (e.assignment) ToProto(*e.assignment, out.mutable_assignment());
  out.set_refusal_code(static_cast<int32_t>(e.refusal.code()));
  out.set_refusal_message(std::string(e.refusal.message()));
  if (!e.refusal.ok()) out.set_refusal_details(ToGrpc(e.refusal).error_details());
  return out;
}

RunEvent FromProto(const pb::RunEvent& e) {
  RunEvent out;
  for (const auto& k : kKinds) {
    if (k.wire == e.kind()) out.kind = k.domain;
  }
  out.round = e.round();
  out.node_id = e.node_id();
  if (e.has_root_cause()) out.root_cause = FromProto(e.root_cause());
  out.restart_count = e.restart_count();
  out.membership_change = e.membership_change();
  out.joined = e.joined();
  out.min_nodes = e.min_nodes();
  out.max_nodes = e.max_nodes();
  out.session = e.session();
  if (e.has_assignment()) out.assignment = FromProto(e.assignment());
  if (e.refusal_code() != 0) {
    out.refusal = absl::Status(static_cast<absl::StatusCode>(e.refusal_code()), e.refusal_message());
    AddDetailPayloads(e.refusal_details(), &out.refusal);
  }
  return out;
}

std::string PeerIp(const std::string& grpc_peer) {
  // Decoded first: a gRPC that percent-encodes more than the brackets
  // (the zone's "%", colons) reads the same.
  const std::string decoded = absl::StrReplaceAll(grpc_peer, {{"%25", "%"}, {"%3A", ":"}});
  const std::optional<PeerParts> parts = SplitPeer(decoded);
  if (!parts) return "";
  absl::string_view ip = parts->address;
  if (size_t zone = ip.find('%'); zone != absl::string_view::npos) ip = ip.substr(0, zone);
  if (parts->family == AF_INET6) {
    absl::string_view v4 = ip;
    if (absl::ConsumePrefix(&v4, "::ffff:") && v4.find(':') == absl::string_view::npos) ip = v4;
  }
  return std::string(ip);
}

void ToProto(const RunStatus& r, v1::RunStatus* out) {
  out->set_run_id(r.run_id);
  out->set_round(r.round);
  out->set_state(r.state);
  out->set_nodes(r.nodes);
  out->set_world_size(r.world_size);
  out->set_restart_count(r.restart_count);
  out->set_kv_keys(r.kv_keys);
  out->set_max_restarts(r.max_restarts);
  out->set_min_nodes(r.min_nodes);
  out->set_max_nodes(r.max_nodes);
  out->set_lost_nodes(r.lost_nodes);
  out->set_kv_waiters(r.kv_waiters);
  out->set_kv_bytes(r.kv_bytes);
  if (r.created != absl::InfinitePast()) out->set_created_ms(absl::ToUnixMillis(r.created));
  if (r.root_cause) ToProto(*r.root_cause, out->mutable_root_cause());
  for (const TimelineEvent& e : r.timeline) {
    v1::TimelineEvent* p = out->add_timeline();
    p->set_time_ms(absl::ToUnixMillis(e.time));
    p->set_kind(e.kind);
    p->set_detail(e.detail);
  }
  out->set_timeline_dropped(r.timeline_dropped);
  for (const NodeStatus& n : r.node_list) {
    v1::NodeStatus* p = out->add_node_list();
    p->set_node_id(n.node_id);
    p->set_hostname(n.hostname);
    p->set_addr(n.addr);
    p->set_node_rank(n.node_rank);
    p->set_nproc(n.nproc);
    p->set_state(n.state);
    p->set_keepalive_age_ms(n.keepalive_age < absl::ZeroDuration() ? -1 : absl::ToInt64Milliseconds(n.keepalive_age));
  }
}

RunStatus FromProto(const v1::RunStatus& r) {
  RunStatus out;
  out.run_id = r.run_id();
  out.round = r.round();
  out.state = r.state();
  out.nodes = r.nodes();
  out.world_size = r.world_size();
  out.restart_count = r.restart_count();
  out.kv_keys = r.kv_keys();
  out.max_restarts = r.max_restarts();
  out.min_nodes = r.min_nodes();
  out.max_nodes = r.max_nodes();
  out.lost_nodes = r.lost_nodes();
  out.kv_waiters = r.kv_waiters();
  out.kv_bytes = r.kv_bytes();
  if (r.created_ms() > 0) out.created = absl::FromUnixMillis(r.created_ms());
  if (r.has_root_cause()) out.root_cause = FromProto(r.root_cause());
  for (const auto& p : r.timeline()) out.timeline.push_back({absl::FromUnixMillis(p.time_ms()), p.kind(), p.detail()});
  out.timeline_dropped = r.timeline_dropped();
  for (const auto& p : r.node_list()) {
    NodeStatus n{p.node_id(), p.hostname(), p.addr(), p.node_rank(), p.nproc(), p.state(),
                 p.keepalive_age_ms() < 0 ? absl::Seconds(-1) : absl::Milliseconds(p.keepalive_age_ms())};
    out.node_list.push_back(std::move(n));
  }
  return out;
}

void ToProto(const ReplicaGroupState& g, v1::ReplicaGroupStatus* out) {
  out->set_state(static_cast<v1::ReplicaGroupStatus::State>(static_cast<int>(g.state)));
  out->set_has_nodes(g.has_nodes);
  out->set_restart_count(g.restart_count);
  out->set_failure(g.failure);
}

ReplicaGroupState FromProto(const v1::ReplicaGroupStatus& g) {
  ReplicaGroupState out;
  // A state this build does not know (a newer server) counts as none.
  const int state = static_cast<int>(g.state());
  out.state = state >= 0 && state <= static_cast<int>(ReplicaGroupState::State::kFailed)
                  ? static_cast<ReplicaGroupState::State>(state)
                  : ReplicaGroupState::State::kNone;
  out.has_nodes = g.has_nodes();
  out.restart_count = g.restart_count();
  out.failure = g.failure();
  return out;
}

}  // namespace meshrun::rendezvous::wire
