// The tutorial's 2-D setup with libmesh: a (2, 4) mesh named
// (replicate, shard) on 8 ranks; one allreduce over each dimension, checked.
//   meshrun --standalone --nproc_per_node=8 build/examples/two_d_setup --device cpu
#include "example_util.h"
#ifdef MESHRUN_WITH_CUDA
#include "device_fill.h"
#endif

using namespace meshrun::mesh;

int main(int argc, char** argv) {
  examples::Args args = examples::ParseArgs("two_d_setup", argc, argv, {2, 4});
  DeviceMesh mesh = examples::Must("init_device_mesh",
                                   InitDeviceMesh(args.device, args.shape, {"replicate", "shard"}));
  const int rank = mesh.rank();
  bool ok = true;
  for (const std::string dim : {"shard", "replicate"}) {
    ProcessGroup* group = examples::Must("get_group", mesh.GetGroup(dim));
    const double contribution = rank == args.corrupt_rank ? rank + 1000 : rank;
    std::vector<double> value = {contribution};
    if (mesh.device_type() == DeviceType::kCuda) {
#ifdef MESHRUN_WITH_CUDA
      // The contribution is written on the GPU by a kernel, reduced there by
      // NCCL, and copied back only to check it.
      double* d = nullptr;
      cudaMalloc(reinterpret_cast<void**>(&d), sizeof(double));
      if (examples::DeviceFill(d, 1, contribution) != 0) examples::Die("fill", absl::InternalError("kernel launch"));
      examples::Must("allreduce", group->AllReduce(d, 1, ReduceOp::kSum));
      cudaMemcpy(value.data(), d, sizeof(double), cudaMemcpyDeviceToHost);
      cudaFree(d);
#else
      examples::Die("allreduce", absl::UnimplementedError("this build of two_d_setup has no CUDA code (build the "
                                                          "examples with the CUDA toolkit: MESHRUN_EXAMPLES_CUDA=ON)"));
#endif
    } else {
      examples::Must("allreduce", examples::AllReduce(mesh.device_type(), group, value));
    }
    double expected = 0;
    for (int r : group->ranks()) expected += r;
    if (value[0] != expected) {
      std::fprintf(stderr, "rank %d: %s sum %.0f, expected %.0f\n", rank, dim.c_str(), value[0], expected);
      ok = false;
    } else {
      std::printf("rank=%d %s_group=[%d..] %s_sum=%.0f OK\n", rank, dim.c_str(), group->ranks()[0], dim.c_str(),
                  value[0]);
    }
  }
  std::fflush(stdout);
  return ok ? 0 : 1;
}
