// ReplicaGroupPlacer: which replica group of a job a node joins (meshrun
// --replica_groups=R). Each group is a run of its own, "<run id>-group-<g>",
// so a failure, a lost node or a restart in one group re-forms that run
// only, and --max_restarts counts per group; the groups share the job's
// lighthouse (the run "<run id>"). Pure domain: no gRPC.
//
// A node asks once, before it joins (its node id is the one it will join
// with). Groups fill in order: every group up to its fewest nodes (MIN / R)
// first, then up to its most (MAX / R), so a job's first N nodes make R
// groups of N / R. A node finding every group full is a standby: it asks
// again later (the agent, every keep_alive_interval) and takes the first
// place a lost node leaves. A group whose run ended (finished, or failed
// with its restarts spent) takes no node.
//
// A place given is held for its node for limits.replica_group_place_hold,
// or until that node takes part in the group's run (its join arrived), so
// nodes asking at the same moment are spread over the groups. Holds live in
// the leader's memory: after a failover, nodes that asked but had not
// joined yet may land in one group together; the one too many waits there
// as that group's standby.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/types.h"
#include "rendezvous/policy/limits.h"
#include "rendezvous/run/replica_group_ends.h"

namespace meshrun::rendezvous {

class RunRegistry;

class ReplicaGroupPlacer {
 public:
  using Clock = std::function<absl::Time()>;

  // `registry` must outlive the placer. `clock`: absl::Now when empty.
  explicit ReplicaGroupPlacer(const RunRegistry* registry, const ServerLimits& limits = ServerLimits(),
                              Clock clock = nullptr);

  // The run id of group `group` of the job `run_id`: "<run id>-group-<g>".
  static std::string GroupRunId(absl::string_view run_id, int group);

  // The group `node_id` joins, of `replica_groups` groups of
  // `min_nodes_per_group`..`max_nodes_per_group` nodes each: the group it
  // already takes part in or holds a place in, else the first group below
  // its MIN, else the first below its MAX. -1 when every group that has not
  // ended is full (a standby: ask again). FAILED_PRECONDITION when every
  // group's run has ended; RESOURCE_EXHAUSTED when max_replica_group_places
  // places are held. The caller checks the arguments (1 <= R <=
  // max_replica_groups, 1 <= MIN <= MAX). FAILED_PRECONDITION too when the
  // job's shape differs from this call's: places are held for it with
  // another R, MIN or MAX (the other nodes' --nnodes and --replica_groups),
  // or group R's run exists (the job has more groups). Thread-safe; O(R +
  // places held in this job) run lookups.
  absl::StatusOr<int> Place(const std::string& run_id, const std::string& node_id, int replica_groups,
                            int min_nodes_per_group, int max_nodes_per_group);

  // How each of the job's `replica_groups` groups stands, group 0 first
  // (kNone for a group the server holds no run of; has_nodes also for a
  // place held for a node yet to join): what the agents judge
  // --min_replica_groups and the job's end by. A group seen ended here
  // stays ended for later calls after its run is removed (ended_run_ttl):
  // each group's agents ask as soon as it ends (replica_group_ends.h). Thread-safe; O(R + places held in
  // the job) run lookups.
  std::vector<ReplicaGroupState> States(const std::string& run_id, int replica_groups);

  // Places held now (every job).
  int64_t held() const;
  // Entries of the expiry list (for tests: at most 2 x held() + 1025).
  int64_t expiry_entries() const;

 private:
  struct Hold {
    int group = 0;
    absl::Time until;
  };
  // One job's places held, and the shape they were given for.
  struct Job {
    int groups = 0, min_nodes = 0, max_nodes = 0;
    absl::flat_hash_map<std::string, Hold> holds;  // By node id.
  };
  // Drops the holds past their time. O(dropped).
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RunRegistry* const registry_;
  const ServerLimits limits_;
  const Clock clock_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);  // By run id.
  // (job, node, until) in the order given: every hold lasts as long, so
  // the front expires first. A hold that went early (its node joined)
  // leaves its entry until then; the list is rebuilt from the holds when
  // it passes twice their number (so it stays O(places held)).
  struct Expiry {
    std::string run_id, node_id;
    absl::Time until;
  };
  std::deque<Expiry> expiries_ ABSL_GUARDED_BY(mu_);
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;

  // The groups seen ended, for States (its own lock, never held with mu_).
  ReplicaGroupEnds ends_;
};

}  // namespace meshrun::rendezvous
