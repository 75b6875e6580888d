#include "rendezvous/run/replica_group_placer.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rendezvous/run/run.h"
#include "rendezvous/run/run_registry.h"

namespace meshrun::rendezvous {

ReplicaGroupPlacer::ReplicaGroupPlacer(const RunRegistry* registry, const ServerLimits& limits, Clock clock)
    : registry_(registry),
      limits_(limits),
      clock_(clock ? std::move(clock) : Clock([] { return absl::Now(); })),
      ends_(limits.max_replica_group_jobs) {}

std::string ReplicaGroupPlacer::GroupRunId(absl::string_view run_id, int group) {
  return absl::StrCat(run_id, "-group-", group);
}

int64_t ReplicaGroupPlacer::held() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

int64_t ReplicaGroupPlacer::expiry_entries() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(expiries_.size());
}

std::vector<ReplicaGroupState> ReplicaGroupPlacer::States(const std::string& run_id, int replica_groups) {
  const size_t r = static_cast<size_t>(std::max(0, replica_groups));
  std::vector<ReplicaGroupState> out(r);
  for (int g = 0; g < replica_groups; ++g) {
    if (std::shared_ptr<Run> run = registry_->Find(GroupRunId(run_id, g))) out[g] = run->AsReplicaGroup();
  }
  {
    // A place held for a node on its way counts as a node of its group.
    absl::MutexLock lock(&mu_);
    ExpireLocked(clock_());
    if (auto job = jobs_.find(run_id); job != jobs_.end()) {
      for (const auto& [node, hold] : job->second.holds) {
        if (hold.group < replica_groups) out[hold.group].has_nodes = true;
      }
    }
  }
  ends_.Merge(run_id, out, clock_());
  return out;
}

void ReplicaGroupPlacer::ExpireLocked(absl::Time now) {
  while (!expiries_.empty() && expiries_.front().until <= now) {
    const Expiry& e = expiries_.front();
    if (auto job = jobs_.find(e.run_id); job != jobs_.end()) {
      // A hold renewed since has a later time and its own entry.
      if (auto h = job->second.holds.find(e.node_id); h != job->second.holds.end() && h->second.until == e.until) {
        job->second.holds.erase(h);
        --held_;
        if (job->second.holds.empty()) jobs_.erase(job);
      }
    }
    expiries_.pop_front();
  }
  if (static_cast<int64_t>(expiries_.size()) > 2 * held_ + 1024) {  // Entries of holds gone early.
    std::deque<Expiry> kept;
    for (const Expiry& e : expiries_) {
      auto job = jobs_.find(e.run_id);
      if (job == jobs_.end()) continue;
      auto h = job->second.holds.find(e.node_id);
      if (h != job->second.holds.end() && h->second.until == e.until) kept.push_back(e);
    }
    expiries_.swap(kept);
  }
}

namespace {

std::string ShapeText(int groups, int min_nodes, int max_nodes) {
  return absl::StrCat(groups, " replica group(s) of ",
                      min_nodes == max_nodes ? absl::StrCat(max_nodes) : absl::StrCat(min_nodes, "..", max_nodes),
                      " node(s)");
}

}  // namespace

absl::StatusOr<int> ReplicaGroupPlacer::Place(const std::string& run_id, const std::string& node_id,
                                              int replica_groups, int min_nodes_per_group,
                                              int max_nodes_per_group) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_();
  ExpireLocked(now);

  // The job's shape: the holds' (while any is held), and no group past R.
  auto job = jobs_.find(run_id);
  if (job != jobs_.end() && (job->second.groups != replica_groups || job->second.min_nodes != min_nodes_per_group ||
                             job->second.max_nodes != max_nodes_per_group)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run '", run_id.substr(0, 64), "' has ",
        ShapeText(job->second.groups, job->second.min_nodes, job->second.max_nodes),
        " (its other nodes' --nnodes and --replica_groups); this node asks for ",
        ShapeText(replica_groups, min_nodes_per_group, max_nodes_per_group)));
  }
  if (std::shared_ptr<Run> beyond = registry_->Find(GroupRunId(run_id, replica_groups));
      beyond != nullptr && !beyond->terminal()) {
    return absl::FailedPreconditionError(absl::StrCat("run '", run_id.substr(0, 64), "' has a replica group ",
                                                      replica_groups, " (its other nodes' --replica_groups is larger); this node asks for ",
                                                      ShapeText(replica_groups, min_nodes_per_group, max_nodes_per_group)));
  }

  // Each group's run (null: none yet) and who takes part in it.
  std::vector<std::shared_ptr<Run>> runs(replica_groups);
  std::vector<Run::Occupancy> occupancy(replica_groups);
  for (int g = 0; g < replica_groups; ++g) {
    runs[g] = registry_->Find(GroupRunId(run_id, g));
    if (runs[g] == nullptr) continue;
    occupancy[g] = runs[g]->OccupancyOf(node_id);
    if (occupancy[g].has_node && !occupancy[g].ended) return g;  // Already there: asked again.
  }

  // The places held for nodes that have not joined yet; a node that has
  // joined its group's run counts there, and its hold goes.
  std::vector<int> held(replica_groups, 0);
  if (job != jobs_.end()) {
    auto& holds = job->second.holds;
    for (auto it = holds.begin(); it != holds.end();) {
      const Hold& h = it->second;  // (h.group < R: the shape is the job's.)
      // (O(1) per hold: the participants' count is the group's, once.)
      const bool joined = runs[h.group] != nullptr && runs[h.group]->TakesPart(it->first);
      const bool own = it->first == node_id;
      if (own && !joined && !occupancy[h.group].ended) return h.group;  // Its place, still held.
      if (joined || own) {  // (Its own, in a group that ended: placed again.)
        holds.erase(it++);
        --held_;
        continue;
      }
      ++held[h.group];
      ++it;
    }
    if (holds.empty()) {
      jobs_.erase(job);
      job = jobs_.end();
    }
  }

  int chosen = -1;
  bool any_open = false;
  for (int target : {min_nodes_per_group, max_nodes_per_group}) {
    for (int g = 0; g < replica_groups && chosen < 0; ++g) {
      if (occupancy[g].ended) continue;
      any_open = true;
      if (occupancy[g].participants + held[g] < target) chosen = g;
    }
    if (chosen >= 0) break;
  }
  if (!any_open) {
    return absl::FailedPreconditionError(absl::StrCat("every replica group of run '", run_id.substr(0, 64),
                                                      "' has ended (", replica_groups, " groups)"));
  }
  if (chosen < 0) return -1;
  if (held_ >= limits_.max_replica_group_places) {
    return absl::ResourceExhaustedError(absl::StrCat("the server holds ", held_,
                                                     " replica group places for nodes yet to join "
                                                     "(max_replica_group_places)"));
  }
  const absl::Time until = now + limits_.replica_group_place_hold;
  Job& j = jobs_[run_id];
  j.groups = replica_groups;
  j.min_nodes = min_nodes_per_group;
  j.max_nodes = max_nodes_per_group;
  j.holds[node_id] = Hold{chosen, until};
  ++held_;
  expiries_.push_back(Expiry{run_id, node_id, until});
  return chosen;
}

}  // namespace meshrun::rendezvous
