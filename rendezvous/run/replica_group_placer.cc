#include "rendezvous/run/replica_group_placer.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rendezvous/run/run.h"
#include "rendezvous/run/run_registry.h"

namespace meshrun::rendezvous {

ReplicaGroupPlacer::ReplicaGroupPlacer(const RunRegistry* registry, const ServerLimits& limits, Clock clock)
    : registry_(registry), limits_(limits), clock_(clock ? std::move(clock) : Clock([] { return absl::Now(); })) {}

std::string ReplicaGroupPlacer::GroupRunId(absl::string_view run_id, int group) {
  return absl::StrCat(run_id, "-group-", group);
}

int64_t ReplicaGroupPlacer::held() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

void ReplicaGroupPlacer::ExpireLocked(absl::Time now) {
  while (!expiries_.empty() && expiries_.front().until <= now) {
    const Expiry& e = expiries_.front();
    if (auto job = holds_.find(e.run_id); job != holds_.end()) {
      // A hold renewed since has a later time and its own entry.
      if (auto h = job->second.find(e.node_id); h != job->second.end() && h->second.until == e.until) {
        job->second.erase(h);
        --held_;
        if (job->second.empty()) holds_.erase(job);
      }
    }
    expiries_.pop_front();
  }
}

absl::StatusOr<int> ReplicaGroupPlacer::Place(const std::string& run_id, const std::string& node_id,
                                              int replica_groups, int min_nodes_per_group,
                                              int max_nodes_per_group) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_();
  ExpireLocked(now);

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
  auto job = holds_.find(run_id);
  std::vector<int> held(replica_groups, 0);
  if (job != holds_.end()) {
    for (auto it = job->second.begin(); it != job->second.end();) {
      const Hold& h = it->second;
      const bool joined = h.group < replica_groups && runs[h.group] != nullptr &&
                          runs[h.group]->OccupancyOf(it->first).has_node;
      const bool own = it->first == node_id;
      if (own && !joined && h.group < replica_groups && !occupancy[h.group].ended) return h.group;  // Still held.
      if (joined || own || h.group >= replica_groups) {  // (Its own, in a group that ended: placed again.)
        job->second.erase(it++);
        --held_;
        continue;
      }
      ++held[h.group];
      ++it;
    }
    if (job->second.empty()) {
      holds_.erase(job);
      job = holds_.end();
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
  holds_[run_id][node_id] = Hold{chosen, until};
  ++held_;
  expiries_.push_back(Expiry{run_id, node_id, until});
  return chosen;
}

}  // namespace meshrun::rendezvous
