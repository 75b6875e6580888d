// libmesh's fault-tolerance manager: per-step fault tolerance for C++
// workers, torchft's Manager over a DeviceMesh.
//
// Training is split into replica groups (meshrun --replica_groups=R: each
// group its own restart scope, docs/user-guide.md "Replica groups"). The
// job's mesh is (replicate, group dims...), say (3, 2) named (replicate,
// shard): the group's own dimensions are a DeviceMesh built once over the
// group (group_mesh()), and the replicate dimension runs across the groups
// of the current quorum. Every step, the groups ask the job's lighthouse
// for a quorum of the healthy groups (torchft's protocol,
// TORCHFT_LIGHTHOUSE); when the quorum changes, the manager builds the
// replicate row anew (each rank with the ranks at its group coordinate in
// every participating group), the group's mesh staying as it is; a group that
// is behind (it restarted) heals first, receiving the state bytes of a
// group at the highest step; a step counts only when every participant
// votes that it succeeded. A failed group is left out of the next quorum and
// restarts alone while the others step on.
//
//   FaultToleranceOptions o;
//   o.group_shape = {2};  o.group_dim_names = {"shard"};
//   o.state_dict = [&] { return Serialize(model); };
//   o.load_state_dict = [&](absl::string_view b) { return Deserialize(b, &model); };
//   auto ft = *FaultToleranceManager::Create("cpu", o);
//   while (ft->step() < steps) {
//     absl::StatusOr<QuorumInfo> q = ft->StartQuorum();  // heals when behind
//     if (!q.ok()) return 1;                              // the agent restarts the group
//     ... forward, backward over ft->group_mesh() ("shard") ...
//     ft->AllReduce(grads, n);                           // sum over "replicate"
//     ... divide by q->replica_world_size ...
//     absl::StatusOr<bool> commit = ft->ShouldCommit();
//     if (!commit.ok()) return 1;
//     if (*commit) optimizer.step();                     // ft->step() advanced
//   }
//
// Where it mirrors torchft 0.2.0: the quorum rule (the lighthouse's), a
// member's step and world size in its quorum request, healing from a
// member at the highest step, should_commit's vote. Where it differs: one
// process per group (group rank 0) asks the lighthouse and the group's
// other ranks read its answer from the group's store (torchft runs a
// ManagerServer for that); the vote spans the replicate row too (torchft's
// spans the group); the replicate row is a new 1-D mesh per quorum id,
// built through the store of the lighthouse's run
// (MESHRUN_LIGHTHOUSE_RUN_ID), which every group's node proxy serves; its
// keys are write-once and stay until that run is removed (a few hundred
// bytes per rank per quorum change).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "meshrun/device_mesh.h"

namespace meshrun::mesh {

struct FaultToleranceOptions {
  // The mesh inside one replica group: its shape (product = the group's
  // world size, WORLD_SIZE under meshrun --replica_groups; empty: one
  // dimension of that size) and names (empty: "shard", "d1", ...).
  std::vector<int> group_shape;
  std::vector<std::string> group_dim_names;
  // Name of the outermost dimension, across the quorum's groups.
  std::string replicate_dim_name = "replicate";
  // Store key namespace: managers of one job must have different names.
  std::string name = "ft";
  // The lighthouse, "http://host:port" (empty: TORCHFT_LIGHTHOUSE).
  std::string lighthouse;
  // This group's name (empty: REPLICA_GROUP_ID, else the run id). The
  // lighthouse sees "<replica_group>:<round>": a group that restarted is a
  // new member, so the others rebuild their communicators with it.
  std::string replica_group;
  // The run whose store all groups share (empty:
  // MESHRUN_LIGHTHOUSE_RUN_ID). The quorums' meshes are built there.
  std::string shared_run_id;
  // How long one quorum may take: the lighthouse's answer (torchft's
  // quorum_timeout), and the group's other ranks' wait for it. A call that
  // fails UNAVAILABLE (a server failover) is asked again within it.
  // Allowed 1 ms to 168 h.
  absl::Duration quorum_timeout = absl::Seconds(60);
  // How often group rank 0 tells the lighthouse the group is alive, between
  // quorums (torchft's heartbeat_interval). Allowed 1 ms to 1 h.
  absl::Duration heartbeat_interval = absl::Milliseconds(100);
  // Consecutive steps that may fail to commit before StartQuorum gives up
  // (ABORTED), so that the agent restarts the group (torchft's
  // max_retries). 1..1000000.
  int max_failed_commits = 3;
  // The group's mesh and each quorum's replicate row (timeout bounds every
  // collective and each mesh's creation, and the group's commit vote; a
  // peer that died fails a collective at once, or at this timeout).
  // mesh_id is the manager's own ("ft-<name>-group", "ft-<name>-q<id>-r<r>").
  MeshOptions mesh;
  // The state a healing group receives: called on a member at the highest
  // step (the bytes of everything a step changes: weights, optimizer
  // state), and on the healing member with those bytes. Required.
  std::function<absl::StatusOr<std::string>()> state_dict;
  std::function<absl::Status(absl::string_view)> load_state_dict;
};

// What StartQuorum decided for this step.
struct QuorumInfo {
  int64_t quorum_id = 0;
  // This group's place among the quorum's groups (sorted by replica id),
  // and how many there are: the replicate dimension's rank and size.
  int replica_rank = 0;
  int replica_world_size = 0;
  // The highest step of the quorum's groups; step() equals it after a heal.
  int64_t max_step = 0;
  // True when this group was behind and received the state (healed).
  bool healed = false;
  // True when the quorum changed and a new replicate row was built.
  bool mesh_changed = false;
  // The participants' replica ids, in replica rank order.
  std::vector<std::string> participants;
  // Groups of the quorum left out of this step: their world size is not
  // the one most of the quorum's groups have.
  std::vector<std::string> left_out;
};

// Thread-safety: one thread drives a manager (StartQuorum, AllReduce,
// ShouldCommit, as one training loop); the other methods are for that
// thread too. A heartbeat thread of its own runs on group rank 0.
class FaultToleranceManager {
 public:
  // Reads meshrun's environment (WorldFromEnv, TORCHFT_LIGHTHOUSE,
  // REPLICA_GROUP_ID, MESHRUN_LIGHTHOUSE_RUN_ID) for what `options` leaves
  // empty and builds the group's mesh (InitDeviceMesh over the group's
  // world: collective within the group, with its errors). No communication
  // with other groups. INVALID_ARGUMENT naming the value for a bad option (a shape
  // whose product is not the group's world size, a missing state_dict or
  // load_state_dict, a duration or count out of range);
  // FAILED_PRECONDITION naming the variable when no lighthouse or shared
  // run is known.
  static absl::StatusOr<std::unique_ptr<FaultToleranceManager>> Create(absl::string_view device_type,
                                                                       FaultToleranceOptions options);
  // The same over an explicit world (the group's).
  static absl::StatusOr<std::unique_ptr<FaultToleranceManager>> Create(absl::string_view device_type,
                                                                       FaultToleranceOptions options,
                                                                       const World& group_world);
  ~FaultToleranceManager();

  // Starts a step (torchft's start_quorum, synchronous): group rank 0 asks
  // the lighthouse for a quorum with this group's step and commit failures;
  // every rank of the group gets the same answer. The participants are the
  // quorum's groups of its most common world size (others are left out of
  // the step, listed in left_out). When the quorum id or the participants'
  // commit failures changed (a step failed somewhere), the replicate row
  // is built anew (collective with the row's members). When this group is
  // behind, it receives the state from the first participant at max_step
  // over the row (load_state_dict) and step() becomes max_step; when any
  // participant is behind, the others send it. A row that cannot be built
  // (a member died after the quorum formed) or a heal that fails makes
  // this step fail (ShouldCommit false), not the call: the next quorum
  // leaves the dead member out.
  // Errors: DEADLINE_EXCEEDED when no quorum came within quorum_timeout;
  // FAILED_PRECONDITION when this group's world size is not the quorum's
  // (naming both), or when the last step was not voted on (ShouldCommit);
  // ABORTED after max_failed_commits steps in a row failed to commit (a
  // state_dict or load_state_dict error fails the step, as a failed heal
  // does). After an error, exit (non-zero): the agent restarts the group,
  // which then heals.
  absl::StatusOr<QuorumInfo> StartQuorum();

  // The group's own mesh (group_shape named group_dim_names), built by
  // Create; valid as long as the manager.
  const DeviceMesh& group_mesh() const;
  // The current quorum's replicate row (replica_world_size members, this
  // rank's group rank in each), or nullptr when it failed in this step.
  // Valid until the next StartQuorum or error: do not keep it.
  ProcessGroup* replicate() const;

  // Sums `count` elements over the replicate dimension, in place (ranks
  // at the same group coordinate of every participating group; device
  // memory on `stream` for "cuda", host memory for "cpu"). An error (a
  // peer group died) is returned, makes this step's ShouldCommit false and
  // drops the row (closing its connections, so that the other members fail
  // at once rather than at the timeout). UNAVAILABLE when the row already
  // failed in this step. Units: elements.
  absl::Status AllReduce(void* buffer, size_t count, DataType type, void* stream = nullptr);
  template <typename T>
  absl::Status AllReduce(T* buffer, size_t count, void* stream = nullptr) {
    return AllReduce(static_cast<void*>(buffer), count, DataTypeOf<T>(), stream);
  }
  // Records an error of this step's work (torchft's report_error): this
  // step's ShouldCommit is false, and the row is dropped.
  void ReportError(const absl::Status& error);

  // The commit vote (torchft's should_commit): true when every rank of
  // this group and, over the replicate row, every participant reports no
  // error for this step (and `local_ok`). When true, step() advances by
  // one. FAILED_PRECONDITION when called twice for one StartQuorum. Errors:
  // the group store's (a rank of the group that never votes:
  // DEADLINE_EXCEEDED at twice the mesh timeout); then exit non-zero.
  absl::StatusOr<bool> ShouldCommit(bool local_ok = true);

  // Committed steps so far (torchft's current_step).
  int64_t step() const;
  // This group's replica id at the lighthouse ("<replica_group>:<round>").
  const std::string& replica_id() const;

  struct Impl;

 private:
  explicit FaultToleranceManager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshrun::mesh
