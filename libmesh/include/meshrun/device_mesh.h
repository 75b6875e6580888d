// libmesh: PyTorch's DeviceMesh for C++ workers launched by meshrun.
//
//   auto mesh = meshrun::mesh::InitDeviceMesh("cuda", {2, 4}, {"replicate", "shard"});
//   ProcessGroup* shard = *mesh->GetGroup("shard");
//
// builds an N-d mesh over the job's ranks and one communicator per mesh
// dimension (per row: the members that differ only along that dimension),
// over NCCL ("cuda") or Gloo ("cpu"), with NCCL unique ids and Gloo addresses
// exchanged through meshrun's rendezvous store.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "meshrun/mesh_layout.h"
#include "meshrun/process_group.h"

namespace meshrun::mesh {

enum class DeviceType { kCpu, kCuda };

// "cpu" -> kCpu (Gloo), "cuda" -> kCuda (NCCL). INVALID_ARGUMENT otherwise,
// also for "cuda:0" ("Device type with index is not supported", as PyTorch).
absl::StatusOr<DeviceType> ParseDeviceType(absl::string_view text);
const char* DeviceTypeName(DeviceType type);

// The world a mesh is built over. Filled from meshrun's environment by
// WorldFromEnv(), or by hand for other launchers.
struct World {
  int rank = 0;                // RANK
  int world_size = 1;          // WORLD_SIZE
  int local_rank = 0;          // LOCAL_RANK: picks the GPU
  int local_world_size = 1;    // LOCAL_WORLD_SIZE
  int node_rank = 0;           // GROUP_RANK
  // MESHRUN_STORE_ENDPOINT: "unix:/..." (the node's store proxy, under
  // meshrun), or "host:port" of a meshrun server.
  std::string store_endpoint;
  std::string run_id;          // MESHRUN_RUN_ID (any string for a standalone `meshrun server`)
  int64_t round = 0;           // MESHRUN_ROUND: scopes every store key
  std::string token;           // MESHRUN_TOKEN (host:port only; the proxy adds meshrun's)
  // MESHRUN_NODE_ADDR: this node's advertised address (numeric), which Gloo
  // pairs bind and publish. Empty: the local address this host uses to
  // reach store_endpoint (127.0.0.1 for a unix: one).
  std::string node_addr;
};

// Reads the world from the variables meshrun sets. FAILED_PRECONDITION
// naming the first missing variable when not started by meshrun.
absl::StatusOr<World> WorldFromEnv();

struct MeshOptions {
  // Bounds every wait of mesh creation (store reads, peers' arrival, each
  // Gloo pair's connect, NCCL's non-blocking init and splits), every Gloo
  // collective, and an NCCL collective's wait while NCCL answers
  // ncclInProgress (not the GPU work itself). With nccl_blocking it does not
  // bound NCCL's init or splits. A member that never arrives fails the
  // others after this long, naming it. Allowed 1 ms to 168 h
  // (INVALID_ARGUMENT otherwise). A store request may add up to the same
  // again for its round trip.
  absl::Duration timeout = absl::Minutes(5);
  // Store key namespace of this mesh. Empty: "m<k>", k counting the meshes
  // this process created; every member must create its meshes in the same
  // order (as with PyTorch's new_group), or name them.
  std::string mesh_id;
  // NCCL only: build one communicator over every member of the mesh (one
  // unique id) and ncclCommSplit it per dimension (colour = the row's first
  // global rank, key = the coordinate), as PyTorch's DeviceMesh does with
  // split_group, instead of one unique id and one ncclCommInitRankConfig per
  // row. A flattened dimension, and a 1-D mesh, still get one id per row.
  bool nccl_split = false;
  // NCCL only: the communicators' mode (ncclConfig_t::blocking).
  // false (default): non-blocking, so that their initialisation is bounded
  //   by `timeout` and aborted when it runs out (NCCL cannot interrupt a
  //   blocking init). NCCL calls made directly on native_handle() may then
  //   return ncclInProgress; poll ncclCommGetAsyncError until it is not
  //   ncclInProgress before the next call (NCCL's non-blocking contract;
  //   PyTorch's TORCH_NCCL_USE_COMM_NONBLOCKING=1). ProcessGroup's own
  //   collectives do this wait themselves.
  // true: blocking communicators, as PyTorch's default: direct NCCL calls
  //   behave as usual, but the initialisation (and nccl_split's splits) are
  //   not bounded by `timeout`: a member that dies during ncclCommInit can
  //   leave the others waiting (the agent's restart ends them).
  bool nccl_blocking = false;
  // NCCL only: how often the watchdog polls ncclCommGetAsyncError; on an
  // error it aborts every communicator of the mesh.
  // Allowed 1 ms to 1 h (INVALID_ARGUMENT otherwise).
  absl::Duration watchdog_interval = absl::Milliseconds(100);
  // Gloo only: the nice value (0..19; 0 leaves it) given to the Gloo
  // device's I/O thread. Debian's Gloo busy-polls on that thread while a
  // peer's data waits for this rank's receive; with more ranks than cores
  // (8 ranks on 2 cores: allreduce 2-4 ms instead of 0.3 ms) the spinning
  // threads starve the ones that would post it. A nice thread still gets
  // any idle core at once; only under full CPU load does it yield.
  int gloo_loop_nice = 19;
  // How the members check that they agree on the mesh (shape, names, device
  // type, backend, rank array) before any communicator exists. A mesh (or a
  // flattened row) of at most this many members: every member reads every
  // member's description with its one store request and checks them itself
  // (no verdict round trip; each read grows with the mesh). A larger one:
  // the first member reads them all and writes a verdict that the others
  // read (one more round trip, but O(members) reads in all). Either way all
  // members go on, or all fail with the same message. Must be the same on
  // every member (as `timeout`). 0: always the first member's verdict.
  int everyone_checks_up_to = 64;
  // Where the mesh's store keys (members' descriptions, Gloo addresses,
  // NCCL unique ids) live. false (default): write-once keys under
  // "mesh/<mesh_id>/", which each node's store proxy caches for the round;
  // they stay until the run ends (a few keys per member and row, as
  // PyTorch's process groups leave theirs in its TCPStore). true: mutable
  // keys under "meshtmp/<mesh_id>/", never cached, that ReleaseStoreKeys
  // deletes: for meshes built again and again in one run (a replica row
  // per quorum), whose keys would otherwise fill the run's store
  // (max_keys_per_run). Must be the same on every member.
  bool releasable_keys = false;
};

struct MeshState;  // Shared by a mesh and the sub-meshes sliced from it.
class DeviceMesh;
namespace internal {
class RecordingStore;
// libmesh's own: what ReleaseStoreKeys deletes, apart from the mesh, so that
// the keys can go after the communicators (null unless releasable_keys).
std::shared_ptr<RecordingStore> KeysWritten(const DeviceMesh& mesh);
}  // namespace internal

// An N-d mesh (or a sub-mesh sliced from one). Copies, slices and flattened
// meshes share the root's communicators, which are destroyed with the last
// of them.
// Thread-safety: const methods are thread-safe; Flatten and Abort may be
// called from any thread.
class DeviceMesh {
 public:
  int ndim() const;
  std::vector<int> shape() const;
  // Size of dimension `dim` (0 <= dim < ndim()); the total size for -1; 0 for
  // a dimension out of range.
  int size(int dim = -1) const;
  const std::vector<std::string>& dim_names() const;
  DeviceType device_type() const;
  // This process's global rank.
  int rank() const;
  // False when this rank is outside the mesh (a mesh built over a subset of
  // the world); then coordinate() is nullopt and groups are unavailable.
  bool is_member() const;
  // This rank's coordinate, one entry per dimension.
  std::optional<std::vector<int>> coordinate() const;
  // The coordinate along `dim` (PyTorch's get_local_rank). FAILED_PRECONDITION
  // for a non-member, NOT_FOUND for an unknown name, INVALID_ARGUMENT for an
  // index outside 0..ndim()-1.
  absl::StatusOr<int> local_rank(int dim) const;
  absl::StatusOr<int> local_rank(const std::string& dim_name) const;
  // The global ranks of this mesh, row-major.
  std::vector<int> ranks() const;

  // Slices the sub-mesh of the named dimensions (in the parent's order) that
  // contains this rank; it shares the parent's communicators (no
  // communication). NOT_FOUND listing the valid names for an unknown name;
  // INVALID_ARGUMENT for names out of the parent's order or repeated.
  absl::StatusOr<DeviceMesh> operator[](const std::string& dim_name) const;
  absl::StatusOr<DeviceMesh> operator[](const std::vector<std::string>& dim_names) const;
  // mesh[{"replicate", "shard"}].
  absl::StatusOr<DeviceMesh> operator[](std::initializer_list<std::string> dim_names) const {
    return (*this)[std::vector<std::string>(dim_names)];
  }

  // Merges every dimension of this (sub-)mesh, which must be adjacent in the
  // root, into one dimension `name` (default: the names joined by "_") with
  // its own communicator, created collectively by the members of each
  // flattened row. Cached per root by name: a second call returns the same
  // communicator without communication.
  absl::StatusOr<DeviceMesh> Flatten(const std::string& name = "") const;

  // The communicator of dimension `dim` (index or name) for this rank's row.
  // A 1-D mesh may omit the dimension. FAILED_PRECONDITION for a non-member
  // or an n-d mesh without a dimension.
  absl::StatusOr<ProcessGroup*> GetGroup(int dim) const;
  absl::StatusOr<ProcessGroup*> GetGroup(const std::string& dim_name) const;
  absl::StatusOr<ProcessGroup*> GetGroup() const;
  absl::StatusOr<std::vector<ProcessGroup*>> GetAllGroups() const;

  // Aborts every communicator of the root mesh (ncclCommAbort for NCCL).
  void Abort() const;

  // Deletes the store keys this member wrote while creating the root mesh
  // and its flattened dimensions (one Delete per key: a few per member and
  // row); the communicators are untouched. Only once every member has
  // created the mesh (after a collective over it, or when the next mesh
  // replaces it): a member still creating it would wait for keys that are
  // gone and fail at options.timeout. FAILED_PRECONDITION unless the mesh
  // was created with MeshOptions::releasable_keys; the store's error
  // (UNAVAILABLE, ...) when a Delete fails, the keys not deleted kept for a
  // later call. A creation that failed keeps its keys (the members that
  // did not fail yet still read them) until the run ends.
  // Thread-safe; no PyTorch counterpart (c10d never deletes a process
  // group's keys).
  absl::Status ReleaseStoreKeys() const;

  // The layout of this mesh (shape, names, rank table, rows).
  const MeshLayout& layout() const;

 private:
  friend absl::StatusOr<DeviceMesh> InitDeviceMeshImpl(DeviceType, MeshLayout, const World&, const MeshOptions&);
  friend std::shared_ptr<internal::RecordingStore> internal::KeysWritten(const DeviceMesh& mesh);
  DeviceMesh(std::shared_ptr<MeshState> state, std::vector<int> dims, MeshLayout layout);

  std::shared_ptr<MeshState> state_;
  std::vector<int> dims_;  // Root dimension (or flattened entry) behind each of this mesh's dimensions.
  MeshLayout layout_;
};

// Builds a mesh of `shape` named `dim_names` over the whole world of
// meshrun's environment, on `device_type` ("cpu" or "cuda"), and creates one
// communicator per dimension; returns only when every communicator is ready.
// One dimension may be -1 (inferred from the world size). Checks, before any
// NCCL call, each with one line naming the values: shape vs world size,
// names, options, "cuda" with no usable GPU, more local ranks than visible
// GPUs. "cuda" loads NCCL (libnccl.so.2, 2.18+) and the CUDA driver
// (libcuda.so.1) at run time, from the library path or, for NCCL, a Python
// environment's pip wheel (docs/install.md); FAILED_PRECONDITION naming every
// place looked in when one is missing. Members then agree through the store, before any communicator
// exists, on (shape, names, device type, backend, rank array), and that no
// two members of a node share a GPU (by PCI bus id): otherwise every member
// fails FAILED_PRECONDITION with the same message naming the two ranks and
// the field (or the shared GPU); a member that never arrives fails the
// others DEADLINE_EXCEEDED at options.timeout, naming it with its
// coordinate. Mirrors torch.distributed.device_mesh.init_device_mesh.
absl::StatusOr<DeviceMesh> InitDeviceMesh(absl::string_view device_type, std::vector<int> shape,
                                          std::vector<std::string> dim_names = {},
                                          const MeshOptions& options = {});
// The same over an explicit world (other launchers).
absl::StatusOr<DeviceMesh> InitDeviceMesh(absl::string_view device_type, std::vector<int> shape,
                                          std::vector<std::string> dim_names, const World& world,
                                          const MeshOptions& options = {});
// A mesh over an explicit rank array (row-major, a subset of the world in
// any order), like DeviceMesh(device, mesh=tensor). Ranks outside it get a
// mesh with is_member() == false and do no communication.
absl::StatusOr<DeviceMesh> InitDeviceMeshFromRanks(absl::string_view device_type, std::vector<int> ranks,
                                                   std::vector<int> shape, std::vector<std::string> dim_names,
                                                   const World& world, const MeshOptions& options = {});

}  // namespace meshrun::mesh
