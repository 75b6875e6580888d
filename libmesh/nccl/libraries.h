// The two libraries the NCCL backend calls, found and loaded at run time
// rather than linked: NCCL (libnccl.so.2, whose ABI is stable across 2.x) and
// the CUDA driver (libcuda.so.1, the driver API, stable across CUDA majors).
// The backend therefore needs no CUDA runtime of a given major: it runs in a
// CUDA 12 image and a CUDA 13 image alike, with the NCCL the image has
// (NCCL carries its own CUDA runtime, linked statically).
//
// Where NCCL is looked for, in order (the first that loads is used):
//   1. MESHRUN_NCCL_LIBRARY, when set: that file and nothing else;
//   2. a libnccl.so.2 already loaded in the process (a worker linked to NCCL,
//      or a Python worker whose torch loaded it);
//   3. the dynamic loader's search: LD_LIBRARY_PATH, ld.so's cache, /lib, /usr/lib;
//   4. pip's NCCL wheels (nvidia-nccl-cu12, -cu13: nvidia/nccl/lib/libnccl.so.2)
//      in the Python environments of the process: $VIRTUAL_ENV, $CONDA_PREFIX,
//      the prefix of every python3 on PATH, $HOME/.local, /usr/local and /usr
//      (their lib/python3*/site-packages and dist-packages), as PyTorch's own
//      wheels find them, without LD_LIBRARY_PATH.
// The CUDA driver comes from the loader's search only (it is the host's:
// installed with the driver, or mounted by NVIDIA's container toolkit).
#pragma once

#include <cuda.h>
#include <nccl.h>

#include <string>

#include "absl/status/statusor.h"

namespace meshrun::mesh::internal {

// NCCL's functions the backend calls (NCCL 2.18 or newer: ncclCommSplit).
struct NcclApi {
  decltype(&::ncclGetVersion) GetVersion;
  decltype(&::ncclGetErrorString) GetErrorString;
  decltype(&::ncclGetUniqueId) GetUniqueId;
  decltype(&::ncclCommInitRankConfig) CommInitRankConfig;
  decltype(&::ncclCommSplit) CommSplit;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError;
  decltype(&::ncclCommDestroy) CommDestroy;
  decltype(&::ncclCommAbort) CommAbort;
  decltype(&::ncclGroupStart) GroupStart;
  decltype(&::ncclGroupEnd) GroupEnd;
  decltype(&::ncclAllReduce) AllReduce;
  decltype(&::ncclAllGather) AllGather;
  decltype(&::ncclReduceScatter) ReduceScatter;
  decltype(&::ncclBroadcast) Broadcast;
};

// The CUDA driver's functions the backend calls (device choice, the barrier's
// scratch integer and its stream synchronisation).
struct DriverApi {
  decltype(&::cuInit) Init;
  decltype(&::cuGetErrorName) GetErrorName;
  decltype(&::cuDeviceGetCount) DeviceGetCount;
  decltype(&::cuDeviceGet) DeviceGet;
  decltype(&::cuDeviceGetPCIBusId) DeviceGetPCIBusId;
  decltype(&::cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent;
  decltype(&::cuMemAlloc) MemAlloc;
  decltype(&::cuMemFree) MemFree;
  decltype(&::cuStreamSynchronize) StreamSynchronize;
};

struct CudaLibraries {
  NcclApi nccl;
  std::string nccl_path;     // the file loaded (as the loader reports it)
  std::string nccl_version;  // "2.27.3"
  DriverApi driver;
  std::string driver_path;
};

// Finds and loads NCCL and the CUDA driver once per process (as above);
// every call returns the first answer. Never unloaded. Thread-safe.
// Errors (FAILED_PRECONDITION, one line): what was not found and every place
// it was looked for, a library without a function the backend needs (named,
// with the NCCL version it came in), or no CUDA driver on this host.
absl::StatusOr<const CudaLibraries*> LoadCudaLibraries();

// The same search, for callers that need NCCL only (ncclGetUniqueId runs
// without a GPU): fails only when NCCL cannot be used; `driver` may then be
// unset.
absl::StatusOr<const CudaLibraries*> LoadNccl();

// "CUDA_ERROR_NO_DEVICE (100)": the driver's name for `r`, or its number.
std::string DriverErrorName(const DriverApi& driver, CUresult r);

}  // namespace meshrun::mesh::internal
