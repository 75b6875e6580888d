// The NCCL backend of libmesh (built when the CUDA and NCCL headers are
// found). NCCL and the CUDA driver are loaded at run time (nccl/libraries.h).

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_join.h"
#include "backends.h"
#include "nccl/libraries.h"
#include "unique_id.h"

namespace meshrun::mesh::internal {
namespace {

// The loaded libraries. Called only after LoadCudaLibraries() succeeded
// (MakeNcclBackend and NcclInitOneCommForTest check it first), or, for
// Nccl() alone, LoadNccl() (NcclUniqueIdForTest).
const CudaLibraries& Libs() { return **LoadNccl(); }
const NcclApi& Nccl() { return Libs().nccl; }
const DriverApi& Driver() { return Libs().driver; }

absl::Status NcclError(ncclResult_t r, const std::string& call, const std::string& where) {
  return absl::InternalError(absl::StrCat(call, " failed on ", where, ": ", Nccl().GetErrorString(r),
                                          r == ncclSystemError || r == ncclRemoteError ? " (see NCCL_DEBUG=WARN)" : ""));
}

absl::Status DriverError(CUresult r, const std::string& call) {
  return absl::InternalError(absl::StrCat(call, " failed: ", DriverErrorName(Driver(), r)));
}

ncclDataType_t NcclType(DataType t) {
  switch (t) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    default: return ncclSum;
  }
}

// Waits until `comm` (non-blocking) has finished its pending operation:
// polls ncclCommGetAsyncError every 0.1 ms (NCCL offers no wait; its docs
// poll the same way) until it is not ncclInProgress or `deadline` passes.
// Returns the final state, or ncclInProgress at the deadline.
ncclResult_t WaitNotInProgress(ncclComm_t comm, absl::Time deadline) {
  for (;;) {
    ncclResult_t state = ncclInProgress;
    if (ncclResult_t r = Nccl().CommGetAsyncError(comm, &state); r != ncclSuccess) return r;
    if (state != ncclInProgress || absl::Now() > deadline) return state;
    absl::SleepFor(absl::Microseconds(100));
  }
}

class NcclGroup : public ProcessGroup {
 public:
  // `timeout` bounds the wait for a non-blocking communicator's pending
  // operation after a call returned ncclInProgress.
  NcclGroup(GroupSpec spec, ncclComm_t comm, absl::Duration timeout)
      : spec_(std::move(spec)), comm_(comm), timeout_(timeout) {}
  ~NcclGroup() override {
    if (scratch_ != 0) Driver().MemFree(scratch_);
    if (comm_ != nullptr) {
      if (aborted_) {
        // Already aborted: nothing left to free.
      } else {
        Nccl().CommDestroy(comm_);
      }
    }
  }

  int rank() const override { return spec_.group_rank; }
  int size() const override { return static_cast<int>(spec_.ranks.size()); }
  const std::vector<int>& ranks() const override { return spec_.ranks; }
  std::string backend() const override { return "nccl"; }
  const std::string& name() const override { return spec_.name; }
  void* native_handle() override { return comm_; }

  // Thread-safe: may end a collective that waits in another thread.
  void Abort() override {
    absl::MutexLock poll(&poll_mu_);
    if (!aborted_.exchange(true)) Nccl().CommAbort(comm_);
  }

  // The watchdog's poll. Skipped while a collective of this group runs (its
  // own wait polls the same state; NCCL's polls are not thread-safe).
  absl::Status AsyncError() {
    if (!call_mu_.TryLock()) return absl::OkStatus();
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclSuccess;
    {
      absl::MutexLock poll(&poll_mu_);
      if (!aborted_) r = Nccl().CommGetAsyncError(comm_, &async);
    }
    call_mu_.Unlock();
    if (r != ncclSuccess) return NcclError(r, "ncclCommGetAsyncError", spec_.name);
    if (async != ncclSuccess && async != ncclInProgress) return NcclError(async, "communicator", spec_.name);
    return absl::OkStatus();
  }

  absl::Status AllReduce(void* buffer, size_t count, DataType type, ReduceOp op, void* stream) override {
    return Call("ncclAllReduce", [&] {
      return Nccl().AllReduce(buffer, buffer, count, NcclType(type), NcclOp(op), comm_, static_cast<cudaStream_t>(stream));
    });
  }
  absl::Status AllGather(const void* send, void* recv, size_t count, DataType type, void* stream) override {
    return Call("ncclAllGather", [&] {
      return Nccl().AllGather(send, recv, count, NcclType(type), comm_, static_cast<cudaStream_t>(stream));
    });
  }
  absl::Status ReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                             void* stream) override {
    return Call("ncclReduceScatter", [&] {
      return Nccl().ReduceScatter(send, recv, count, NcclType(type), NcclOp(op), comm_, static_cast<cudaStream_t>(stream));
    });
  }
  absl::Status Broadcast(void* buffer, size_t count, DataType type, int root, void* stream) override {
    if (root < 0 || root >= size()) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " outside 0..", size() - 1));
    }
    return Call("ncclBroadcast", [&] {
      return Nccl().Broadcast(buffer, buffer, count, NcclType(type), root, comm_, static_cast<cudaStream_t>(stream));
    });
  }
  absl::Status Barrier() override {
    if (scratch_ == 0) {
      if (CUresult e = Driver().MemAlloc(&scratch_, sizeof(int)); e != CUDA_SUCCESS) return DriverError(e, "cuMemAlloc");
    }
    void* scratch = reinterpret_cast<void*>(scratch_);
    if (absl::Status s = Call("ncclAllReduce", [&] {
          return Nccl().AllReduce(scratch, scratch, 1, ncclInt32, ncclSum, comm_, nullptr);
        });
        !s.ok()) {
      return s;
    }
    if (CUresult e = Driver().StreamSynchronize(nullptr); e != CUDA_SUCCESS) return DriverError(e, "cuStreamSynchronize");
    return absl::OkStatus();
  }

 private:
  // Checks for an abort before touching the communicator. A non-blocking
  // communicator may answer ncclInProgress (e.g. while it connects to a peer
  // for the first collective of a kind): then waits, as NCCL requires before
  // the next call, until it is done or the mesh timeout passes (then the
  // communicator is aborted: DEADLINE_EXCEEDED).
  template <typename F>
  absl::Status Call(const char* what, F&& call) {
    absl::MutexLock lock(&call_mu_);
    auto aborted = [&] { return absl::AbortedError(absl::StrCat(what, " on ", spec_.name, ": the mesh was aborted")); };
    if (aborted_) return aborted();
    ncclResult_t r = call();
    const absl::Time deadline = absl::Now() + timeout_;
    while (r == ncclInProgress) {
      {
        absl::MutexLock poll(&poll_mu_);
        if (aborted_) return aborted();
        if (ncclResult_t e = Nccl().CommGetAsyncError(comm_, &r); e != ncclSuccess) r = e;
      }
      if (r != ncclInProgress) break;
      if (absl::Now() > deadline) {
        Abort();
        return absl::DeadlineExceededError(absl::StrCat(what, " on ", spec_.name, ": still in progress after ",
                                                        absl::FormatDuration(timeout_), "; communicator aborted"));
      }
      absl::SleepFor(absl::Microseconds(100));
    }
    if (r == ncclInvalidArgument || r == ncclInvalidUsage) {
      return absl::InvalidArgumentError(absl::StrCat(what, " on ", spec_.name, ": ", Nccl().GetErrorString(r)));
    }
    if (r != ncclSuccess) return NcclError(r, what, spec_.name);
    return absl::OkStatus();
  }

  GroupSpec spec_;
  ncclComm_t comm_;
  absl::Duration timeout_;
  // call_mu_: held by a collective for its whole duration (the watchdog
  // skips its poll meanwhile). poll_mu_: held around each
  // ncclCommGetAsyncError and around ncclCommAbort, so no poll touches a
  // communicator that Abort() is freeing.
  absl::Mutex call_mu_;
  absl::Mutex poll_mu_;
  std::atomic<bool> aborted_{false};
  CUdeviceptr scratch_ = 0;
};

absl::StatusOr<std::string> NewUniqueId() {
  ncclUniqueId id;
  ncclResult_t r = Nccl().GetUniqueId(&id);
  if (r != ncclSuccess) return NcclError(r, "ncclGetUniqueId", "this rank");
  return std::string(id.internal, sizeof(id.internal));
}

// Picks this process's GPU before any NCCL call, through the CUDA driver: a
// GPU exists (or the driver says why not), and local ranks do not outnumber
// visible devices. Makes the device's primary context current on this
// thread (what cudaSetDevice does; the CUDA runtime of the worker and of NCCL
// then use that device). Returns the device and its PCI bus id; the
// agreement checks that no two members of a node share it.
absl::StatusOr<std::pair<int, std::string>> SelectDevice(const World& world) {
  const CudaLibraries& libs = Libs();
  const DriverApi& d = libs.driver;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string visible_text = absl::StrCat("CUDA_VISIBLE_DEVICES=", visible ? visible : "<unset>");
  auto no_device = [&] {
    return absl::FailedPreconditionError(
        absl::StrCat("device type 'cuda' but no CUDA device is visible (", visible_text, "); use \"cpu\" for Gloo"));
  };
  int count = 0;
  CUresult e = d.Init(0);
  if (e == CUDA_SUCCESS) e = d.DeviceGetCount(&count);
  if (e == CUDA_ERROR_NO_DEVICE || (e == CUDA_SUCCESS && count == 0)) return no_device();
  if (e != CUDA_SUCCESS) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device type 'cuda' but the CUDA driver (", libs.driver_path, ") answered ", DriverErrorName(d, e),
        " when asked for a device (", visible_text, "; NCCL ", libs.nccl_version, " from ", libs.nccl_path, ")"));
  }
  int device = count == 1 ? 0 : world.local_rank;
  if (count > 1 && world.local_rank >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "LOCAL_RANK ", world.local_rank, " but only ", count, " CUDA devices are visible: more local ranks (",
        world.local_world_size, ") than devices"));
  }
  if (count > 1 && world.local_world_size > count) {
    return absl::FailedPreconditionError(absl::StrCat("more local ranks (", world.local_world_size,
                                                      ") than visible CUDA devices (", count, ")"));
  }
  CUdevice dev = 0;
  if (CUresult r = d.DeviceGet(&dev, device); r != CUDA_SUCCESS) return DriverError(r, "cuDeviceGet");
  char bus[64] = {0};
  if (CUresult r = d.DeviceGetPCIBusId(bus, sizeof(bus), dev); r != CUDA_SUCCESS) {
    return DriverError(r, "cuDeviceGetPCIBusId");
  }
  // Retained for the life of the process, as the CUDA runtime keeps it.
  CUcontext ctx = nullptr;
  if (CUresult r = d.DevicePrimaryCtxRetain(&ctx, dev); r != CUDA_SUCCESS) {
    return DriverError(r, "cuDevicePrimaryCtxRetain");
  }
  if (CUresult r = d.CtxSetCurrent(ctx); r != CUDA_SUCCESS) return DriverError(r, "cuCtxSetCurrent");
  return std::make_pair(device, std::string(bus));
}

// Creates the communicators of `rows` from their unique ids, all in one
// NCCL group so that the dimensions initialise concurrently.
// Non-blocking (the default): every communicator is created with
// config.blocking = 0 and polled until ready, bounded by `timeout`; on an
// error or at the deadline all are aborted (NCCL's way to bound an init:
// a blocking init cannot be interrupted safely). The handles stay
// non-blocking: NCCL cannot turn them into blocking ones (ncclCommSplit of
// a non-blocking parent into a blocking child fails, "Blocking and
// nonblocking communicators are not allowed in the same group", seen with
// NCCL 2.28 on an H200). Blocking (`blocking`): ncclGroupEnd returns when
// every communicator is ready or one failed; not bounded by `timeout`.
absl::StatusOr<std::vector<std::unique_ptr<ProcessGroup>>> InitComms(const std::vector<GroupSpec>& rows,
                                                                     const std::vector<std::string>& ids,
                                                                     absl::Duration timeout, bool blocking) {
  std::vector<ncclComm_t> comms(rows.size(), nullptr);
  auto abort_all = [&comms] {
    for (ncclComm_t c : comms) {
      if (c != nullptr) Nccl().CommAbort(c);
    }
  };
  Nccl().GroupStart();
  for (size_t i = 0; i < rows.size(); ++i) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking ? 1 : 0;
    config.commName = rows[i].name.c_str();
    ncclUniqueId id;
    std::memcpy(id.internal, ids[i].data(), sizeof(id.internal));
    ncclResult_t r = Nccl().CommInitRankConfig(&comms[i], static_cast<int>(rows[i].ranks.size()), id,
                                            rows[i].group_rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      Nccl().GroupEnd();
      abort_all();
      return NcclError(r, "ncclCommInitRankConfig", rows[i].name);
    }
  }
  ncclResult_t end = Nccl().GroupEnd();
  if (end != ncclSuccess && end != ncclInProgress) {
    abort_all();
    return NcclError(end, "ncclGroupEnd", absl::StrCat("mesh init of ", rows.front().name, " and the others"));
  }
  if (!blocking) {
    const absl::Time deadline = absl::Now() + timeout;
    for (size_t i = 0; i < rows.size(); ++i) {
      ncclResult_t state = comms[i] == nullptr ? ncclInternalError : WaitNotInProgress(comms[i], deadline);
      if (state == ncclSuccess) continue;
      abort_all();
      if (state == ncclInProgress) {
        return absl::DeadlineExceededError(absl::StrCat("mesh dimension '", rows[i].dim_name, "': ", rows[i].name,
                                                        " did not initialise within ", absl::FormatDuration(timeout)));
      }
      // NCCL fails every communicator of a failed group: name them all (seen
      // on an H200: a one-rank row failed for its two-rank neighbour).
      std::string where = rows[i].name;
      if (rows.size() > 1) {
        std::vector<std::string> others;
        for (size_t j = 0; j < rows.size(); ++j) {
          if (j != i) others.push_back(rows[j].name);
        }
        absl::StrAppend(&where, " (initialised in one NCCL group with ", absl::StrJoin(others, ", "), ")");
      }
      return NcclError(state, "ncclCommInitRankConfig", where);
    }
  }
  std::vector<std::unique_ptr<ProcessGroup>> out;
  for (size_t i = 0; i < rows.size(); ++i) out.push_back(std::make_unique<NcclGroup>(rows[i], comms[i], timeout));
  return out;
}

// MeshOptions::nccl_split: one world communicator over every member of the
// mesh (one unique id, created as InitComms does), then one ncclCommSplit
// of it per dimension, colour = the row's first global rank, key = the
// coordinate (what PyTorch's DeviceMesh does with split_group). Every
// member splits the dimensions in the same order, as NCCL requires. A
// child has its parent's blocking mode; a non-blocking split is bounded by
// `timeout` (the parent shows ncclInProgress until the child exists, and
// NCCL stores the child's handle when its init ends). The world
// communicator is destroyed once the rows exist.
absl::StatusOr<std::vector<std::unique_ptr<ProcessGroup>>> SplitComms(Store& store,
                                                                      const std::vector<GroupSpec>& rows,
                                                                      const Agreement& agreement,
                                                                      absl::Duration timeout, bool blocking) {
  GroupSpec world;
  world.key = absl::StrCat(agreement.key, "/world");
  world.name = world.key;
  world.dim_name = "(world of the mesh)";
  world.ranks = agreement.members;
  world.group_rank = static_cast<int>(
      std::find(world.ranks.begin(), world.ranks.end(), agreement.desc.rank) - world.ranks.begin());
  absl::StatusOr<std::vector<std::string>> ids = ExchangeUniqueIds(store, {world}, agreement, timeout,
                                                                   NewUniqueId);
  if (!ids.ok()) return ids.status();
  absl::StatusOr<std::vector<std::unique_ptr<ProcessGroup>>> parent = InitComms({world}, *ids, timeout, blocking);
  if (!parent.ok()) return parent.status();
  ncclComm_t world_comm = static_cast<ncclComm_t>((*parent)[0]->native_handle());
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::unique_ptr<ProcessGroup>> out;
  for (const GroupSpec& row : rows) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking ? 1 : 0;
    config.commName = row.name.c_str();
    // NCCL writes the child's handle from its own thread when the split
    // ends; the slot outlives a split that runs out of time (leaked then).
    auto* slot = new ncclComm_t(nullptr);
    ncclResult_t r = Nccl().CommSplit(world_comm, row.ranks.front(), row.group_rank, slot, &config);
    if (r == ncclSuccess || r == ncclInProgress) {
      // A non-blocking split may still run even when the call said
      // ncclSuccess (seen with NCCL 2.28): done when the parent is no longer
      // in progress, NCCL has stored the child, and the child is ready.
      ncclComm_t child = nullptr;
      for (;;) {
        r = WaitNotInProgress(world_comm, deadline);
        if (r != ncclSuccess) break;
        child = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        if (child != nullptr) {
          r = WaitNotInProgress(child, deadline);
          if (r == ncclSuccess) r = WaitNotInProgress(world_comm, deadline);
          break;
        }
        if (absl::Now() > deadline) {
          r = ncclInProgress;
          break;
        }
        absl::SleepFor(absl::Microseconds(100));
      }
    }
    if (r != ncclSuccess) {
      (*parent)[0]->Abort();  // also ends a child's init still running
      if (r == ncclInProgress) {
        return absl::DeadlineExceededError(absl::StrCat("mesh dimension '", row.dim_name, "': splitting ", row.name,
                                                        " did not finish within ", absl::FormatDuration(timeout)));
      }
      if (ncclComm_t child = __atomic_load_n(slot, __ATOMIC_ACQUIRE); child != nullptr) {
        Nccl().CommAbort(child);
        delete slot;  // else NCCL may still write it: leaked
      }
      return NcclError(r, "ncclCommSplit", row.name);
    }
    out.push_back(std::make_unique<NcclGroup>(row, *slot, timeout));
    delete slot;
  }
  return out;  // `parent` (the world communicator) is destroyed here
}

}  // namespace

absl::StatusOr<Backend> MakeNcclBackend(std::shared_ptr<Store> store, const World& world, const MeshOptions& options) {
  if (absl::StatusOr<const CudaLibraries*> libs = LoadCudaLibraries(); !libs.ok()) return libs.status();
  absl::StatusOr<std::pair<int, std::string>> device = SelectDevice(world);
  if (!device.ok()) return device.status();
  Backend b;
  b.name = "nccl";
  b.device_id = device->second;
  b.watchdog_interval = options.watchdog_interval;
  absl::Duration timeout = options.timeout;
  // The agreement check is part of the id exchange (one request per rank
  // for every dimension, plus a larger mesh's verdict).
  const bool split = options.nccl_split;
  const bool blocking = options.nccl_blocking;
  b.create_groups = [store, timeout, split, blocking](const std::vector<GroupSpec>& rows, const Agreement& agreement)
      -> absl::StatusOr<std::vector<std::unique_ptr<ProcessGroup>>> {
    // A flattened dimension (one row) gets its own id either way.
    if (split && rows.size() > 1) return SplitComms(*store, rows, agreement, timeout, blocking);
    absl::StatusOr<std::vector<std::string>> ids =
        ExchangeUniqueIds(*store, rows, agreement, timeout, NewUniqueId);
    if (!ids.ok()) return ids.status();
    return InitComms(rows, *ids, timeout, blocking);
  };
  b.health_check = [](ProcessGroup* g) { return static_cast<NcclGroup*>(g)->AsyncError(); };
  return b;
}

}  // namespace meshrun::mesh::internal

namespace meshrun::mesh::internal {
absl::StatusOr<std::string> NcclUniqueIdForTest() {
  if (absl::StatusOr<const CudaLibraries*> libs = LoadNccl(); !libs.ok()) return libs.status();
  return NewUniqueId();
}
absl::Status NcclInitOneCommForTest(const std::string& id, int nranks, int rank, absl::Duration timeout,
                                    bool blocking) {
  if (absl::StatusOr<const CudaLibraries*> libs = LoadCudaLibraries(); !libs.ok()) return libs.status();
  GroupSpec row;
  row.key = row.name = "test/x/row0";
  row.dim_name = "x";
  for (int r = 0; r < nranks; ++r) row.ranks.push_back(r);
  row.group_rank = rank;
  return InitComms({row}, {id}, timeout, blocking).status();
}
}  // namespace meshrun::mesh::internal
