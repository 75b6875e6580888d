#include "launcher/numa_binding.h"

#include <hwloc.h>

#include <algorithm>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace meshrun::launcher {
namespace {

const char* ModeName(NumaMode m) {
  switch (m) {
    case NumaMode::kNode: return "node";
    case NumaMode::kSocket: return "socket";
    case NumaMode::kExclusive: return "exclusive";
    case NumaMode::kCoreComplex: return "core-complex";
  }
  return "?";
}

std::vector<int> Indices(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  int i;
  hwloc_bitmap_foreach_begin(i, set) { out.push_back(i); }
  hwloc_bitmap_foreach_end();
  return out;
}

hwloc_obj_t NumaNodeByOsIndex(hwloc_topology_t topo, int os_index) {
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr); n != nullptr;
       n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n)) {
    if (static_cast<int>(n->os_index) == os_index) return n;
  }
  return nullptr;
}

// Objects of `type` whose CPUs lie inside `cpuset`, in logical order.
std::vector<hwloc_obj_t> Inside(hwloc_topology_t topo, hwloc_const_cpuset_t cpuset, hwloc_obj_type_t type) {
  std::vector<hwloc_obj_t> out;
  for (hwloc_obj_t o = hwloc_get_next_obj_inside_cpuset_by_type(topo, cpuset, type, nullptr); o != nullptr;
       o = hwloc_get_next_obj_inside_cpuset_by_type(topo, cpuset, type, o)) {
    out.push_back(o);
  }
  return out;
}

std::vector<int> CpusOf(const std::vector<hwloc_obj_t>& objs) {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  for (hwloc_obj_t o : objs) hwloc_bitmap_or(set, set, o->cpuset);
  std::vector<int> out = Indices(set);
  hwloc_bitmap_free(set);
  return out;
}

}  // namespace

absl::StatusOr<NumaMode> ParseNumaMode(const std::string& text) {
  if (text == "node") return NumaMode::kNode;
  if (text == "socket") return NumaMode::kSocket;
  if (text == "exclusive") return NumaMode::kExclusive;
  if (text == "core-complex" || text == "core_complex") return NumaMode::kCoreComplex;
  return absl::InvalidArgumentError(
      absl::StrCat("--numa_binding=", text, ": must be node, socket, exclusive or core-complex"));
}

Topology::~Topology() {
  if (topo_ != nullptr) hwloc_topology_destroy(topo_);
}

Topology::Topology(Topology&& other) noexcept : topo_(other.topo_) { other.topo_ = nullptr; }

absl::StatusOr<Topology> Topology::FromSynthetic(const std::string& description) {
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0) return absl::InternalError("hwloc_topology_init failed");
  if (hwloc_topology_set_synthetic(t, description.c_str()) != 0 || hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    return absl::InvalidArgumentError(absl::StrCat("hwloc refused the synthetic topology '", description, "'"));
  }
  return Topology(t);
}

absl::StatusOr<Topology> Topology::FromXml(const std::string& path) {
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0) return absl::InternalError("hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_set_xml(t, path.c_str()) != 0 || hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    return absl::InvalidArgumentError(absl::StrCat("hwloc cannot load the topology XML file '", path, "'"));
  }
  return Topology(t);
}

absl::StatusOr<Topology> Topology::ThisMachine() {
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0) return absl::InternalError("hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    return absl::InternalError("hwloc cannot read this machine's topology");
  }
  return Topology(t);
}

std::vector<int> Topology::NvidiaGpuNumaNodes() const {
  std::vector<std::pair<std::tuple<unsigned, unsigned, unsigned, unsigned>, int>> gpus;
  for (hwloc_obj_t p = hwloc_get_next_pcidev(topo_, nullptr); p != nullptr; p = hwloc_get_next_pcidev(topo_, p)) {
    const auto& a = p->attr->pcidev;
    const unsigned base_class = a.class_id >> 8;
    if (a.vendor_id != 0x10de || base_class != 0x03) continue;  // NVIDIA display/3D controllers.
    hwloc_obj_t parent = hwloc_get_non_io_ancestor_obj(topo_, p);
    int node = -1;
    if (parent != nullptr && parent->nodeset != nullptr && !hwloc_bitmap_iszero(parent->nodeset)) {
      node = hwloc_bitmap_first(parent->nodeset);
    }
    gpus.push_back({{a.domain, a.bus, a.dev, a.func}, node});
  }
  std::sort(gpus.begin(), gpus.end());
  std::vector<int> out;
  for (const auto& g : gpus) out.push_back(g.second);
  return out;
}

absl::StatusOr<std::vector<NumaPlacement>> PlaceRanks(const Topology& topology, NumaMode mode,
                                                      const std::vector<int>& gpu_numa_node) {
  hwloc_topology_t topo = topology.get();
  // Ranks per node, in local-rank order (for exclusive and core-complex).
  std::map<int, std::vector<int>> ranks_on;
  for (size_t i = 0; i < gpu_numa_node.size(); ++i) ranks_on[gpu_numa_node[i]].push_back(static_cast<int>(i));
  std::vector<NumaPlacement> out(gpu_numa_node.size());
  for (size_t i = 0; i < gpu_numa_node.size(); ++i) {
    const int node_index = gpu_numa_node[i];
    hwloc_obj_t node = NumaNodeByOsIndex(topo, node_index);
    if (node == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("--numa_binding=", ModeName(mode), ": GPU ", i,
                                                        " is on NUMA node ", node_index,
                                                        ", which the topology does not have"));
    }
    NumaPlacement& p = out[i];
    p.mem_nodes = {node_index};
    const std::vector<int>& peers = ranks_on[node_index];
    const int k = static_cast<int>(std::find(peers.begin(), peers.end(), static_cast<int>(i)) - peers.begin());
    switch (mode) {
      case NumaMode::kNode:
        p.cpus = Indices(node->cpuset);
        break;
      case NumaMode::kSocket: {
        hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, node);
        if (pkg == nullptr) pkg = hwloc_get_root_obj(topo);
        p.cpus = Indices(pkg->cpuset);
        p.mem_nodes = Indices(pkg->nodeset);
        break;
      }
      case NumaMode::kExclusive: {
        std::vector<hwloc_obj_t> cores = Inside(topo, node->cpuset, HWLOC_OBJ_CORE);
        const int n = static_cast<int>(peers.size());
        const int c = static_cast<int>(cores.size());
        if (c < n) {
          return absl::FailedPreconditionError(absl::StrCat("--numa_binding=exclusive: NUMA node ", node_index,
                                                            " has ", c, " cores for ", n,
                                                            " local ranks; use node or socket"));
        }
        const int base = c / n, extra = c % n;
        const int first = k * base + std::min(k, extra);
        const int count = base + (k < extra ? 1 : 0);
        p.cpus = CpusOf(std::vector<hwloc_obj_t>(cores.begin() + first, cores.begin() + first + count));
        break;
      }
      case NumaMode::kCoreComplex: {
        std::vector<hwloc_obj_t> l3 = Inside(topo, node->cpuset, HWLOC_OBJ_L3CACHE);
        if (l3.empty()) {
          return absl::FailedPreconditionError(absl::StrCat("--numa_binding=core-complex: NUMA node ", node_index,
                                                            " has no L3 cache inside it; use node or exclusive"));
        }
        p.cpus = Indices(l3[k % l3.size()]->cpuset);
        break;
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<NumaPlacement>> PlaceOnThisMachine(NumaMode mode, int nproc,
                                                              const std::optional<std::string>& cuda_visible_devices) {
  absl::StatusOr<Topology> topo = Topology::ThisMachine();
  if (!topo.ok()) return topo.status();
  std::vector<int> gpus = topo->NvidiaGpuNumaNodes();
  if (gpus.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--numa_binding=", ModeName(mode),
        ": no NVIDIA GPU on this machine (hwloc finds no PCI device of vendor 0x10de); it binds local rank i "
        "near GPU i, so leave it out here"));
  }
  std::vector<int> chosen = gpus;
  if (cuda_visible_devices && !cuda_visible_devices->empty()) {
    chosen.clear();
    for (absl::string_view d : absl::StrSplit(*cuda_visible_devices, ',')) {
      int index = 0;
      if (!absl::SimpleAtoi(d, &index) || index < 0 || index >= static_cast<int>(gpus.size())) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--numa_binding: CUDA_VISIBLE_DEVICES entry '", d, "' is not a GPU index 0..", gpus.size() - 1,
            " (UUIDs are not supported here)"));
      }
      chosen.push_back(gpus[index]);
    }
  }
  if (static_cast<int>(chosen.size()) < nproc) {
    return absl::FailedPreconditionError(absl::StrCat("--numa_binding: ", chosen.size(), " GPUs for --nproc_per_node=",
                                                      nproc, "; it needs one GPU per local rank"));
  }
  chosen.resize(nproc);
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (chosen[i] < 0) {
      return absl::FailedPreconditionError(absl::StrCat("--numa_binding: hwloc does not know the NUMA node of GPU ", i));
    }
  }
  return PlaceRanks(*topo, mode, chosen);
}

}  // namespace meshrun::launcher
