// Slicing a (2, 2, 2) mesh named (replicate, shard, tp) as the tutorial
// does: hsdp_mesh = mesh["replicate", "shard"], tp_mesh = mesh["tp"]; the
// sub-meshes share the parent's communicators. Also flattens the HSDP
// sub-mesh into one "dp" communicator. Every allreduce is checked.
#include "example_util.h"

using namespace meshrun::mesh;

int main(int argc, char** argv) {
  examples::Args args = examples::ParseArgs("three_d_slicing", argc, argv, {2, 2, 2});
  DeviceMesh mesh = examples::Must("init_device_mesh",
                                   InitDeviceMesh(args.device, args.shape, {"replicate", "shard", "tp"}));
  DeviceMesh hsdp = examples::Must("slice", mesh[std::vector<std::string>{"replicate", "shard"}]);
  DeviceMesh tp = examples::Must("slice", mesh["tp"]);
  ProcessGroup* replicate = examples::Must("group", hsdp["replicate"].value().GetGroup());
  ProcessGroup* shard = examples::Must("group", hsdp["shard"].value().GetGroup());
  ProcessGroup* tp_group = examples::Must("group", tp.GetGroup());
  // Sub-meshes share the parent's communicators.
  bool ok = replicate == *mesh.GetGroup("replicate") && shard == *mesh.GetGroup("shard") &&
            tp_group == *mesh.GetGroup("tp");
  if (!ok) std::fprintf(stderr, "rank %d: a sliced group is not the parent's\n", mesh.rank());
  DeviceMesh dp = examples::Must("flatten", hsdp.Flatten("dp"));
  ProcessGroup* dp_group = examples::Must("group", dp.GetGroup());
  DeviceMesh dp_again = examples::Must("flatten", hsdp.Flatten("dp"));
  if (*dp_again.GetGroup() != dp_group) {
    std::fprintf(stderr, "rank %d: a second Flatten made a new communicator\n", mesh.rank());
    ok = false;
  }
  const int rank = mesh.rank();
  struct Case { const char* name; ProcessGroup* group; int size; };
  const std::vector<int>& s = args.shape;
  for (const Case& c : {Case{"replicate", replicate, s[0]}, Case{"shard", shard, s[1]}, Case{"tp", tp_group, s[2]},
                        Case{"dp", dp_group, s[0] * s[1]}}) {
    std::vector<int64_t> v = {rank == args.corrupt_rank ? rank + 1000 : rank, 1};
    examples::Must("allreduce", examples::AllReduce(mesh.device_type(), c.group, v));
    int64_t expected = 0;
    for (int r : c.group->ranks()) expected += r;
    if (v[0] != expected || v[1] != c.size || c.group->size() != c.size) {
      std::fprintf(stderr, "rank %d: %s sum %lld (expected %lld), count %lld (expected %d)\n", rank, c.name,
                   static_cast<long long>(v[0]), static_cast<long long>(expected), static_cast<long long>(v[1]),
                   c.size);
      ok = false;
    }
  }
  if (ok) std::printf("rank=%d coordinate=(%d,%d,%d) slices OK\n", rank, (*mesh.coordinate())[0],
                      (*mesh.coordinate())[1], (*mesh.coordinate())[2]);
  std::fflush(stdout);
  return ok ? 0 : 1;
}
