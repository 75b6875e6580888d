// Run: what Status reports, the summary an ended run keeps for it once its
// nodes have left, and whether a run left by its nodes is idle.
#include <algorithm>
#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "rendezvous/run/run.h"

namespace meshrun::rendezvous {

Run::Occupancy Run::OccupancyOf(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  Occupancy o;
  o.ended = state_ == State::kFinished || state_ == State::kFailed;
  absl::flat_hash_set<absl::string_view> ids;
  for (const auto& m : members_) ids.insert(m.node.node_id);
  for (const auto& m : reforming_) ids.insert(m.node.node_id);
  for (const auto& j : pending_) ids.insert(j.node.node_id);
  o.participants = static_cast<int>(ids.size());
  o.has_node = IsParticipantLocked(node_id);
  return o;
}

bool Run::TakesPart(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  return IsParticipantLocked(node_id);
}

ReplicaGroupState Run::AsReplicaGroup() const {
  absl::MutexLock lock(&mu_);
  ReplicaGroupState g;
  switch (state_) {
    case State::kJoining: g.state = ReplicaGroupState::State::kJoining; break;
    case State::kRunning: g.state = ReplicaGroupState::State::kRunning; break;
    case State::kFinished: g.state = ReplicaGroupState::State::kFinished; break;
    case State::kFailed: g.state = ReplicaGroupState::State::kFailed; break;
  }
  g.has_nodes = !members_.empty() || !reforming_.empty() || !pending_.empty();
  g.restart_count = restarts_.spent();
  if (state_ == State::kFailed) {
    g.failure = restarts_.has_root_cause() ? DescribeRootCause(restarts_.root_cause()) : "failed";
  }
  return g;
}

bool Run::IdleNodeless(absl::Time cutoff) const {
  // The atomics first: a run in use is passed over without its lock.
  if (!had_node_.load() || last_activity_.load(std::memory_order_relaxed) >= absl::ToUnixNanos(cutoff)) {
    return false;
  }
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kFinished || state_ == State::kFailed) return false;  // ended_run_ttl's.
    if (!pending_.empty() || !members_.empty() || !reforming_.empty() || !streams_.empty()) return false;
  }
  return kv_->waiters() == 0;
}

RunStatus Run::Status(bool events) const {
  RunStatus s;
  {
    absl::MutexLock lock(&mu_);
    s.run_id = run_id_;
    s.created = created_;
    if (restarts_.has_root_cause()) s.root_cause = restarts_.root_cause();
    if (events) {
      s.timeline = timeline_.Events();
      s.timeline_dropped = timeline_.dropped();
    }
    s.round = round_;
    s.state = StateName(state_);
    s.restart_count = restarts_.spent();
    s.max_restarts = config_.max_restarts;
    s.min_nodes = config_.min_nodes;
    s.max_nodes = config_.max_nodes;
    s.lost_nodes = membership_.lost_count();
    const absl::Time now = absl::Now();
    auto age = [&](absl::Time last_seen) {
      return last_seen == absl::InfinitePast() ? absl::Seconds(-1) : now - last_seen;
    };
    if (status_only_) {
      s.nodes = static_cast<int>(summary_.size());
      summary_.AppendTo(s, StateName(state_), now);
    } else {
      s.nodes = static_cast<int>(state_ == State::kJoining ? pending_.size() : members_.size());
      auto last_seen = [&](const std::string& id) { return membership_.LastSeen(id); };
      for (const auto& m : members_) {
        s.world_size += m.node.nproc;
        NodeStatus n{m.node.node_id, m.node.hostname, m.node.addr, m.assignment.node_rank, m.node.nproc, "",
                     age(last_seen(m.node.node_id))};
        if (m.finished) {
          n.state = "finished";
        } else {
          n.state = state_ == State::kRunning ? "running" : StateName(state_);
        }
        s.node_list.push_back(std::move(n));
      }
      std::sort(s.node_list.begin(), s.node_list.end(),
                [](const NodeStatus& a, const NodeStatus& b) { return a.node_rank < b.node_rank; });
      for (const auto& j : pending_) {
        NodeStatus n{j.node.node_id, j.node.hostname, j.node.addr, -1, j.node.nproc, "",
                     age(last_seen(j.node.node_id))};
        if (state_ == State::kRunning) {
          n.state = static_cast<int>(members_.size()) >= config_.max_nodes ? "standing by" : "waiting";
        } else {
          n.state = "joining";
        }
        s.node_list.push_back(std::move(n));
      }
    }
  }
  s.kv_keys = kv_->size();
  s.kv_bytes = kv_->bytes();
  s.kv_waiters = kv_->waiters();
  return s;
}

void Run::MaybeKeepOnlyStatusLocked() {
  if ((state_ == State::kFinished || state_ == State::kFailed) && streams_.empty()) KeepOnlyStatusLocked();
}

absl::Status Run::EndedLocked() const {
  return absl::FailedPreconditionError(
      absl::StrCat("run '", run_id_.substr(0, 64), "' has already ", StateName(state_), " at round ", round_));
}

void Run::KeepOnlyStatusLocked() {
  if (status_only_) return;
  // An ended run has no joiners (EndLocked's callers answer and clear them)
  // and no round being re-formed that Status shows.
  size_t text_size = 0;
  for (const auto& m : members_) text_size += m.node.node_id.size() + m.node.hostname.size() + m.node.addr.size();
  if (!summary_.Reserve(members_.size(), text_size)) return;  // Past 4 GiB: kept whole.
  status_only_ = true;
  agents_left_.store(true);
  for (const auto& m : members_) {
    summary_.Add(m.node, m.assignment.node_rank, m.finished, membership_.LastSeen(m.node.node_id));
  }
  summary_.Seal();
  // Freed, not only emptied: swapped with empty ones.
  members_ = NodeList<Member>();
  reforming_ = NodeList<Member>();
  pending_ = NodeList<Joiner>();
  membership_.Release();
  streams_.Release();
  barrier_waiters_.Release();
  absl::flat_hash_map<std::string, absl::StatusOr<Assignment>>().swap(unsent_answers_);
}

}  // namespace meshrun::rendezvous
