// The two backends behind DeviceMesh, behind one small interface.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/store.h"
#include "agreement.h"
#include "mesh_internal.h"

namespace meshrun::mesh::internal {

// Polls a health check of every watched group every `interval`; when one
// reports an error, aborts every watched group (the mesh) once.
class Watchdog {
 public:
  // `check` returns a non-OK status for a group with an asynchronous error.
  Watchdog(absl::Duration interval, std::function<absl::Status(ProcessGroup*)> check);
  ~Watchdog();
  void Watch(ProcessGroup* group);

 private:
  void Loop();
  absl::Duration interval_;
  std::function<absl::Status(ProcessGroup*)> check_;
  absl::Mutex mu_;
  std::vector<ProcessGroup*> groups_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread thread_;
};

struct Backend {
  std::string name;  // "gloo" | "nccl"
  // Creates the communicators of `rows` (one per row this rank belongs to)
  // once the members agree.
  using CreateGroups = std::function<absl::StatusOr<std::vector<std::unique_ptr<ProcessGroup>>>(
      const std::vector<GroupSpec>& rows, const Agreement& agreement)>;
  CreateGroups create_groups;
  // NCCL: this process's GPU (PCI bus id), for the shared-GPU check of the
  // agreement. Gloo: "".
  std::string device_id;
  // NCCL: polls async errors. Gloo: none.
  std::function<absl::Status(ProcessGroup*)> health_check;
  absl::Duration watchdog_interval = absl::Milliseconds(100);
  std::shared_ptr<Watchdog> watchdog;

  void StartWatchdog(const std::vector<ProcessGroup*>& groups);
  void WatchGroup(ProcessGroup* group);
  void StopWatchdog() { watchdog.reset(); }
};

absl::StatusOr<Backend> MakeGlooBackend(std::shared_ptr<Store> store, const World& world, const MeshOptions& options);
// UNIMPLEMENTED when libmesh was built without NCCL.
// Picks the GPU (local checks only; the agreement checks that no two
// members of a node share it).
absl::StatusOr<Backend> MakeNcclBackend(std::shared_ptr<Store> store, const World& world, const MeshOptions& options);

}  // namespace meshrun::mesh::internal
