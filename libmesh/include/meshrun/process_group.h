// A communicator over the members of one row of one mesh dimension, over
// Gloo (host buffers) or NCCL (device buffers on a CUDA stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace meshrun::mesh {

enum class DataType { kFloat32, kFloat64, kInt32, kInt64 };
enum class ReduceOp { kSum, kMax, kMin };

// Bytes per element of `type`.
size_t SizeOf(DataType type);

template <typename T>
constexpr DataType DataTypeOf();
template <> constexpr DataType DataTypeOf<float>() { return DataType::kFloat32; }
template <> constexpr DataType DataTypeOf<double>() { return DataType::kFloat64; }
template <> constexpr DataType DataTypeOf<int32_t>() { return DataType::kInt32; }
template <> constexpr DataType DataTypeOf<int64_t>() { return DataType::kInt64; }

// `int` is int32_t on every platform meshrun supports.

// One communicator. Collectives are blocking for Gloo; for NCCL they are
// enqueued on `stream` (a cudaStream_t, nullptr = the default stream) and
// return once enqueued, as ncclAllReduce does. Counts are in elements.
// Buffers: host memory for Gloo, device memory for NCCL. Every member must
// call the same collectives in the same order (as with any communicator).
// Errors: INVALID_ARGUMENT for a broadcast root out of range and for NCCL's
// invalid-argument/usage errors (Gloo's own argument checks fail as
// INTERNAL); DEADLINE_EXCEEDED when a Gloo peer does not answer within the
// mesh timeout, or when a non-blocking NCCL communicator stays in progress
// that long (it is then aborted); INTERNAL carrying the backend's message
// otherwise; after Abort(), every call fails ABORTED.
// Thread-safety: one thread at a time per group (as a communicator).
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  // This member's rank in the group: its coordinate along the dimension.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The members' global ranks, by group rank.
  virtual const std::vector<int>& ranks() const = 0;
  // "gloo" or "nccl".
  virtual std::string backend() const = 0;
  // "<mesh id>/<dimension name>/row<r>", also the NCCL commName.
  virtual const std::string& name() const = 0;

  // In-place allreduce of `count` elements (ncclAllReduce / gloo::allreduce).
  virtual absl::Status AllReduce(void* buffer, size_t count, DataType type, ReduceOp op,
                                 void* stream = nullptr) = 0;
  // Gathers `count` elements from every member into `recv` (size()*count
  // elements, member i at offset i*count) (ncclAllGather / gloo::allgather).
  virtual absl::Status AllGather(const void* send, void* recv, size_t count, DataType type,
                                 void* stream = nullptr) = 0;
  // Reduces size()*count elements of `send` and leaves block rank() (count
  // elements) in `recv` (ncclReduceScatter; for Gloo an allreduce of a copy,
  // keeping this member's block: Debian Gloo's halving-doubling
  // reduce-scatter gave wrong results on 3 and 6 members).
  virtual absl::Status ReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                                     void* stream = nullptr) = 0;
  // Broadcasts `count` elements from group rank `root` (ncclBroadcast).
  virtual absl::Status Broadcast(void* buffer, size_t count, DataType type, int root,
                                 void* stream = nullptr) = 0;
  // Returns when every member has entered the barrier (for NCCL: a 1-element
  // allreduce followed by a stream synchronisation).
  virtual absl::Status Barrier() = 0;

  // The backend's own handle: an ncclComm_t, or a gloo::Context* (owned by
  // the group; valid until the mesh is destroyed), for calling NCCL or Gloo
  // directly. The ncclComm_t is non-blocking unless
  // MeshOptions::nccl_blocking was set: a direct NCCL call on it may return
  // ncclInProgress, after which poll ncclCommGetAsyncError until it is not. Gloo called directly does not get the group's loop ticking
  // (see MeshOptions::gloo_loop_nice): with Debian's Gloo each such
  // collective may wait for a turn of Gloo's 10 ms event loop.
  virtual void* native_handle() = 0;

  // Aborts the communicator; later calls fail ABORTED. Thread-safe. NCCL:
  // ncclCommAbort, which also ends a collective running in another thread.
  // Gloo: marks the group aborted; a collective already running finishes or
  // fails at the mesh timeout.
  virtual void Abort() = 0;

  // Typed conveniences.
  template <typename T>
  absl::Status AllReduce(T* buffer, size_t count, ReduceOp op = ReduceOp::kSum, void* stream = nullptr) {
    return AllReduce(static_cast<void*>(buffer), count, DataTypeOf<T>(), op, stream);
  }
  template <typename T>
  absl::Status AllGather(const T* send, T* recv, size_t count, void* stream = nullptr) {
    return AllGather(static_cast<const void*>(send), static_cast<void*>(recv), count, DataTypeOf<T>(), stream);
  }
  template <typename T>
  absl::Status ReduceScatter(const T* send, T* recv, size_t count, ReduceOp op = ReduceOp::kSum,
                             void* stream = nullptr) {
    return ReduceScatter(static_cast<const void*>(send), static_cast<void*>(recv), count, DataTypeOf<T>(), op,
                         stream);
  }
  template <typename T>
  absl::Status Broadcast(T* buffer, size_t count, int root, void* stream = nullptr) {
    return Broadcast(static_cast<void*>(buffer), count, DataTypeOf<T>(), root, stream);
  }
};

}  // namespace meshrun::mesh
