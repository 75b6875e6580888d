// Shared by the examples: flags, host<->device staging, checks.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "meshrun/device_mesh.h"

#ifdef MESHRUN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace examples {

struct Args {
  std::string device = "cpu";
  int corrupt_rank = -1;
  std::vector<int> shape;  // The example's default unless --shape is given.
};

// Parses --device cpu|cuda and --corrupt_rank=R; exits 2 with one line on
// a bad value.
inline Args ParseArgs(const char* name, int argc, char** argv, std::vector<int> default_shape) {
  Args a;
  a.shape = std::move(default_shape);
  CLI::App app{name, name};
  app.add_option("--device", a.device, "cpu (Gloo) or cuda (NCCL)")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--corrupt_rank,--corrupt-rank", a.corrupt_rank,
                 "This rank contributes a wrong value: the example's check must then fail");
  app.add_option("--shape", a.shape, "Mesh shape, comma-separated (e.g. 1,1 on a one-GPU machine)")
      ->delimiter(',')->expected(static_cast<int>(a.shape.size()));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (char& c : msg) c = c == '\n' ? ' ' : c;
    std::fprintf(stderr, "%s: error: %s\n", name, msg.c_str());
    std::exit(2);
  }
  return a;
}

[[noreturn]] inline void Die(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Must(const std::string& what, absl::StatusOr<T> v) {
  if (!v.ok()) Die(what, v.status());
  return std::move(*v);
}

inline void Must(const std::string& what, const absl::Status& s) {
  if (!s.ok()) Die(what, s);
}

// Runs `op(device_pointer)` on a copy of `host` (n elements) placed where
// the mesh's backend wants it (host for Gloo, GPU for NCCL), then copies
// `out_n` elements back into `out`.
template <typename T, typename Op>
absl::Status Staged(meshrun::mesh::DeviceType device, const std::vector<T>& host, std::vector<T>& out, Op op) {
  if (device == meshrun::mesh::DeviceType::kCpu) {
    std::vector<T> in = host;
    absl::Status s = op(in.data(), out.data());
    return s;
  }
#ifdef MESHRUN_WITH_CUDA
  T* d_in = nullptr;
  T* d_out = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&d_in), std::max<size_t>(1, host.size()) * sizeof(T)) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&d_out), std::max<size_t>(1, out.size()) * sizeof(T)) != cudaSuccess) {
    return absl::ResourceExhaustedError("cudaMalloc failed");
  }
  cudaMemcpy(d_in, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  absl::Status s = op(d_in, d_out);
  cudaStreamSynchronize(nullptr);
  cudaMemcpy(out.data(), d_out, out.size() * sizeof(T), cudaMemcpyDeviceToHost);
  cudaFree(d_in);
  cudaFree(d_out);
  return s;
#else
  return absl::UnimplementedError("built without CUDA");
#endif
}

// In-place allreduce of a host vector, staged for the backend.
template <typename T>
absl::Status AllReduce(meshrun::mesh::DeviceType device, meshrun::mesh::ProcessGroup* g, std::vector<T>& v,
                       meshrun::mesh::ReduceOp op = meshrun::mesh::ReduceOp::kSum) {
  std::vector<T> out(v.size());
  absl::Status s = Staged<T>(device, v, out, [&](T* in, T* o) {
    absl::Status r = g->AllReduce(in, v.size(), op);
    if (device == meshrun::mesh::DeviceType::kCpu) {
      std::memcpy(o, in, v.size() * sizeof(T));
    } else {
#ifdef MESHRUN_WITH_CUDA
      cudaMemcpy(o, in, v.size() * sizeof(T), cudaMemcpyDeviceToDevice);
#endif
    }
    return r;
  });
  v = out;
  return s;
}

}  // namespace examples
