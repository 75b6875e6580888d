// Built against the installed meshrun package: a 2-D mesh (2, world/2)
// named (replicate, shard), one allreduce over each dimension, checked
// against the sum of that dimension's group's ranks.
#include <cstdio>
#include <string>

#include "meshrun/device_mesh.h"

int main() {
  auto mesh = meshrun::mesh::InitDeviceMesh("cpu", {2, -1}, {"replicate", "shard"});
  if (!mesh.ok()) {
    std::fprintf(stderr, "%s\n", mesh.status().ToString().c_str());
    return 1;
  }
  for (const std::string dim : {"shard", "replicate"}) {
    auto group = mesh->GetGroup(dim);
    int value = mesh->rank();
    if (!group.ok() || !(*group)->AllReduce(&value, 1).ok()) return 1;
    int expected = 0;
    for (int r : (*group)->ranks()) expected += r;
    if (value != expected) {
      std::fprintf(stderr, "consumer rank=%d %s sum=%d, expected %d\n", mesh->rank(), dim.c_str(), value, expected);
      return 1;
    }
    std::printf("consumer rank=%d %s_sum=%d OK\n", mesh->rank(), dim.c_str(), value);
  }
  return 0;
}
