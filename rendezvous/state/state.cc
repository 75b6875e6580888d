#include "rendezvous/state/state.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace meshrun::rendezvous::state {
namespace {

using nlohmann::json;

int64_t Ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

json NodeJson(const NodeDesc& n) {
  return json{{"node_id", n.node_id},
              {"hostname", n.hostname},
              {"addr", n.addr},
              {"pid", n.pid},
              {"nproc", n.nproc},
              {"node_rank_hint", n.node_rank_hint},
              {"is_endpoint_host", n.is_endpoint_host},
              {"master_port", n.master_port},
              {"role", n.role},
              {"local_addr", n.local_addr},
              {"dialed_addr", n.dialed_addr}};
}

json AssignmentJson(const Assignment& a) {
  return json{{"round", a.round},
              {"node_rank", a.node_rank},
              {"node_count", a.node_count},
              {"rank_base", a.rank_base},
              {"world_size", a.world_size},
              {"master_addr", a.master_addr},
              {"master_port", a.master_port},
              {"restart_count", a.restart_count},
              {"max_restarts", a.max_restarts},
              {"role_rank_base", a.role_rank_base},
              {"role_world_size", a.role_world_size},
              {"node_addr", a.node_addr},
              {"session", a.session}};
}

json FailureJson(const WorkerFailure& f) {
  return json{{"node_id", f.node_id},     {"hostname", f.hostname},   {"node_rank", f.node_rank},
              {"rank", f.rank},           {"local_rank", f.local_rank}, {"exit_code", f.exit_code},
              {"signal", f.signal},       {"message", f.message},     {"round", f.round},
              {"time_ns", absl::ToUnixNanos(f.time)}, {"permanent", f.permanent}};
}

// Reads field `name` of `j` into `out`; the first failure is kept in `err`.
template <typename T>
void Get(const json& j, const char* where, const char* name, T* out, std::string* err) {
  if (!err->empty()) return;
  auto it = j.find(name);
  if (it == j.end()) {
    *err = absl::StrCat(where, ".", name, " is missing");
    return;
  }
  try {
    *out = it->template get<T>();
  } catch (const json::exception&) {
    *err = absl::StrCat(where, ".", name, " has the wrong type");
  }
}

void GetMs(const json& j, const char* where, const char* name, absl::Duration* out, std::string* err) {
  int64_t ms = 0;
  Get(j, where, name, &ms, err);
  if (err->empty()) *out = absl::Milliseconds(ms);
}

}  // namespace

std::string EncodeRunRecord(const RunRecord& r) {
  json members = json::array();
  for (const MemberRecord& m : r.members) {
    members.push_back(json{{"node", NodeJson(m.node)}, {"assignment", AssignmentJson(m.assignment)},
                           {"finished", m.finished}});
  }
  json j{{"run_id", r.run_id},
         {"incarnation", r.incarnation},
         {"store_only", r.store_only},
         {"seq", r.seq},
         {"state", r.state},
         {"config",
          json{{"min_nodes", r.config.min_nodes},
               {"max_nodes", r.config.max_nodes},
               {"last_call_timeout_ms", Ms(r.config.last_call_timeout)},
               {"max_restarts", r.config.max_restarts},
               {"exit_barrier_timeout_ms", Ms(r.config.exit_barrier_timeout)},
               {"keep_alive_interval_ms", Ms(r.config.keep_alive_interval)},
               {"keep_alive_max_attempt", r.config.keep_alive_max_attempt}}},
         {"round", r.round},
         {"restart_count", r.restart_count},
         {"members", std::move(members)}};
  if (r.root_cause) j["root_cause"] = FailureJson(*r.root_cause);
  if (r.created != absl::InfinitePast()) j["created_ms"] = absl::ToUnixMillis(r.created);
  if (!r.timeline.empty() || r.timeline_dropped > 0) {
    json events = json::array();
    for (const TimelineEvent& e : r.timeline) {
      events.push_back(json{{"time_ms", absl::ToUnixMillis(e.time)}, {"kind", e.kind}, {"detail", e.detail}});
    }
    j["timeline"] = std::move(events);
    j["timeline_dropped"] = r.timeline_dropped;
  }
  // Node ids and messages may hold any byte: replace invalid UTF-8 rather
  // than throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<RunRecord> DecodeRunRecord(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("run record: not a JSON object");
  RunRecord r;
  std::string err;
  Get(j, "run", "run_id", &r.run_id, &err);
  Get(j, "run", "incarnation", &r.incarnation, &err);
  if (j.contains("store_only")) Get(j, "run", "store_only", &r.store_only, &err);
  Get(j, "run", "seq", &r.seq, &err);
  Get(j, "run", "state", &r.state, &err);
  Get(j, "run", "round", &r.round, &err);
  Get(j, "run", "restart_count", &r.restart_count, &err);
  json config;
  Get(j, "run", "config", &config, &err);
  if (err.empty() && !config.is_object()) err = "run.config is not an object";
  if (err.empty()) {
    Get(config, "config", "min_nodes", &r.config.min_nodes, &err);
    Get(config, "config", "max_nodes", &r.config.max_nodes, &err);
    GetMs(config, "config", "last_call_timeout_ms", &r.config.last_call_timeout, &err);
    Get(config, "config", "max_restarts", &r.config.max_restarts, &err);
    GetMs(config, "config", "exit_barrier_timeout_ms", &r.config.exit_barrier_timeout, &err);
    GetMs(config, "config", "keep_alive_interval_ms", &r.config.keep_alive_interval, &err);
    Get(config, "config", "keep_alive_max_attempt", &r.config.keep_alive_max_attempt, &err);
  }
  if (err.empty() && r.state != "joining" && r.state != "running" && r.state != "finished" && r.state != "failed") {
    err = absl::StrCat("run.state '", r.state.substr(0, 32), "' is none of joining, running, finished, failed");
  }
  if (err.empty() && j.contains("root_cause")) {
    const json& f = j["root_cause"];
    WorkerFailure w;
    int64_t ns = 0;
    Get(f, "root_cause", "node_id", &w.node_id, &err);
    Get(f, "root_cause", "hostname", &w.hostname, &err);
    Get(f, "root_cause", "node_rank", &w.node_rank, &err);
    Get(f, "root_cause", "rank", &w.rank, &err);
    Get(f, "root_cause", "local_rank", &w.local_rank, &err);
    Get(f, "root_cause", "exit_code", &w.exit_code, &err);
    Get(f, "root_cause", "signal", &w.signal, &err);
    Get(f, "root_cause", "message", &w.message, &err);
    Get(f, "root_cause", "round", &w.round, &err);
    Get(f, "root_cause", "time_ns", &ns, &err);
    Get(f, "root_cause", "permanent", &w.permanent, &err);
    w.time = absl::FromUnixNanos(ns);
    r.root_cause = w;
  }
  // Records written before the timeline have none.
  if (err.empty() && j.contains("created_ms")) {
    int64_t ms = 0;
    Get(j, "run", "created_ms", &ms, &err);
    r.created = absl::FromUnixMillis(ms);
  }
  if (err.empty() && j.contains("timeline")) {
    const json& events = j["timeline"];
    if (!events.is_array()) err = "run.timeline is not an array";
    for (size_t i = 0; err.empty() && i < events.size(); ++i) {
      TimelineEvent e;
      int64_t ms = 0;
      Get(events[i], "timeline", "time_ms", &ms, &err);
      Get(events[i], "timeline", "kind", &e.kind, &err);
      Get(events[i], "timeline", "detail", &e.detail, &err);
      e.time = absl::FromUnixMillis(ms);
      r.timeline.push_back(std::move(e));
    }
    if (err.empty() && j.contains("timeline_dropped")) Get(j, "run", "timeline_dropped", &r.timeline_dropped, &err);
  }
  json members;
  Get(j, "run", "members", &members, &err);
  if (err.empty() && !members.is_array()) err = "run.members is not an array";
  if (err.empty()) {
    for (const json& m : members) {
      MemberRecord mr;
      json n, a;
      Get(m, "member", "node", &n, &err);
      Get(m, "member", "assignment", &a, &err);
      Get(m, "member", "finished", &mr.finished, &err);
      if (!err.empty()) break;
      Get(n, "node", "node_id", &mr.node.node_id, &err);
      Get(n, "node", "hostname", &mr.node.hostname, &err);
      Get(n, "node", "addr", &mr.node.addr, &err);
      Get(n, "node", "pid", &mr.node.pid, &err);
      Get(n, "node", "nproc", &mr.node.nproc, &err);
      Get(n, "node", "node_rank_hint", &mr.node.node_rank_hint, &err);
      Get(n, "node", "is_endpoint_host", &mr.node.is_endpoint_host, &err);
      Get(n, "node", "master_port", &mr.node.master_port, &err);
      Get(n, "node", "role", &mr.node.role, &err);
      Get(n, "node", "local_addr", &mr.node.local_addr, &err);
      Get(n, "node", "dialed_addr", &mr.node.dialed_addr, &err);
      Get(a, "assignment", "round", &mr.assignment.round, &err);
      Get(a, "assignment", "node_rank", &mr.assignment.node_rank, &err);
      Get(a, "assignment", "node_count", &mr.assignment.node_count, &err);
      Get(a, "assignment", "rank_base", &mr.assignment.rank_base, &err);
      Get(a, "assignment", "world_size", &mr.assignment.world_size, &err);
      Get(a, "assignment", "master_addr", &mr.assignment.master_addr, &err);
      Get(a, "assignment", "master_port", &mr.assignment.master_port, &err);
      Get(a, "assignment", "restart_count", &mr.assignment.restart_count, &err);
      Get(a, "assignment", "max_restarts", &mr.assignment.max_restarts, &err);
      Get(a, "assignment", "role_rank_base", &mr.assignment.role_rank_base, &err);
      Get(a, "assignment", "role_world_size", &mr.assignment.role_world_size, &err);
      Get(a, "assignment", "node_addr", &mr.assignment.node_addr, &err);
      Get(a, "assignment", "session", &mr.assignment.session, &err);
      if (!err.empty()) break;
      r.members.push_back(std::move(mr));
    }
  }
  if (!err.empty()) return absl::InvalidArgumentError(absl::StrCat("run record: ", err));
  return r;
}

void MemoryJournal::FailWrites(absl::Status why, bool applied) {
  absl::MutexLock lock(&mu_);
  fail_ = std::move(why);
  fail_applied_ = applied;
}

absl::Status MemoryJournal::Save(const RunRecord& record) {
  absl::MutexLock lock(&mu_);
  if (!fail_.ok() && !fail_applied_) return fail_;
  auto it = runs_.find(record.run_id);
  if (it != runs_.end() && it->second.seq >= record.seq) return fail_;
  runs_[record.run_id] = record;
  ++writes_;
  return fail_;
}

absl::Status MemoryJournal::Drop(const std::string& run_id, int64_t incarnation) {
  absl::MutexLock lock(&mu_);
  if (!fail_.ok() && !fail_applied_) return fail_;
  if (auto it = runs_.find(run_id); it != runs_.end() && it->second.incarnation == incarnation) runs_.erase(it);
  keys_.erase({run_id, incarnation});
  return fail_;
}

absl::Status MemoryJournal::SaveKeys(const std::string& run_id, int64_t incarnation, int64_t round,
                                     const std::vector<std::pair<std::string, std::string>>& set,
                                     const std::vector<std::string>& erase) {
  absl::MutexLock lock(&mu_);
  if (!fail_.ok() && !fail_applied_) return fail_;
  // A run with no record yet (a store-only run's first write) gets one.
  if (auto it = runs_.find(run_id); it == runs_.end() || it->second.incarnation != incarnation) {
    RunRecord r;
    r.run_id = run_id;
    r.incarnation = incarnation;
    r.store_only = true;
    runs_[run_id] = std::move(r);
  }
  KeyMap& keys = keys_[{run_id, incarnation}];
  for (const auto& [k, v] : set) keys[{round, k}] = v;
  for (const auto& k : erase) keys.erase({round, k});
  return fail_;
}

absl::Status MemoryJournal::DropKeysBelow(const std::string& run_id, int64_t incarnation, int64_t round) {
  absl::MutexLock lock(&mu_);
  if (!fail_.ok() && !fail_applied_) return fail_;
  auto it = keys_.find({run_id, incarnation});
  if (it != keys_.end()) it->second.erase(it->second.begin(), it->second.lower_bound({round, std::string()}));
  return fail_;
}

absl::StatusOr<std::vector<RunRecord>> MemoryJournal::Load() {
  absl::MutexLock lock(&mu_);
  std::vector<RunRecord> out;
  for (auto it = keys_.begin(); it != keys_.end();) {
    auto rec = runs_.find(it->first.first);
    if (rec == runs_.end() || rec->second.incarnation != it->first.second) {
      it = keys_.erase(it);  // Of no record: a removal that did not happen.
    } else {
      ++it;
    }
  }
  for (const auto& [id, r] : runs_) {
    out.push_back(r);
    if (auto it = keys_.find({id, r.incarnation}); it != keys_.end()) {
      for (const auto& [rk, v] : it->second) out.back().keys.push_back({rk.first, rk.second, v});
    }
  }
  return out;
}

int64_t MemoryJournal::keys() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& [id, k] : keys_) n += static_cast<int64_t>(k.size());
  return n;
}

int64_t MemoryJournal::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

}  // namespace meshrun::rendezvous::state
