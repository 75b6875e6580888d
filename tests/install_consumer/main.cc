// Built against the installed meshrun package: a 1-D mesh over the world,
// one allreduce, checked.
#include <cstdio>

#include "meshrun/device_mesh.h"

int main() {
  auto mesh = meshrun::mesh::InitDeviceMesh("cpu", {-1}, {"world"});
  if (!mesh.ok()) {
    std::fprintf(stderr, "%s\n", mesh.status().ToString().c_str());
    return 1;
  }
  auto group = mesh->GetGroup();
  int value = mesh->rank();
  if (!group.ok() || !(*group)->AllReduce(&value, 1).ok()) return 1;
  const int n = mesh->size();
  if (value != n * (n - 1) / 2) return 1;
  std::printf("consumer rank=%d sum=%d OK\n", mesh->rank(), value);
  return 0;
}
