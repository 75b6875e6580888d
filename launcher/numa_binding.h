// torchrun's --numa-binding: local rank i is bound to the CPUs and memory
// near GPU i, in one of torch.numa.binding's AffinityMode values. The
// placement is pure over an hwloc topology, which comes from this machine,
// an hwloc XML file or a synthetic description (tests).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

struct hwloc_topology;

namespace meshrun::launcher {

// torch.numa.binding.AffinityMode:
//   kNode        every CPU of GPU i's NUMA node;
//   kSocket      every CPU of the package (socket) holding that node, and
//                every NUMA node of that package for memory;
//   kExclusive   the node's cores shared out among the local ranks whose GPU
//                is on that node: disjoint whole cores, as even as possible
//                (the first ranks get one more when they do not divide);
//   kCoreComplex one L3 cache domain (core complex) of the node per rank,
//                distinct while there are enough, then reused in turn.
// Memory is the GPU's NUMA node, except for kSocket.
enum class NumaMode { kNode, kSocket, kExclusive, kCoreComplex };

// "node", "socket", "exclusive" or "core-complex" (also "core_complex");
// INVALID_ARGUMENT naming the value and the four allowed.
absl::StatusOr<NumaMode> ParseNumaMode(const std::string& text);

// Where one worker runs: OS indices of CPUs (PUs) and of NUMA nodes.
struct NumaPlacement {
  std::vector<int> cpus;
  std::vector<int> mem_nodes;
};

// An hwloc topology, owned. Not thread-safe (hwloc topologies are not).
class Topology {
 public:
  ~Topology();
  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) = delete;

  // hwloc's synthetic description, e.g. "package:2 numa:2 l3:2 core:4 pu:2".
  // INVALID_ARGUMENT naming the description when hwloc refuses it.
  static absl::StatusOr<Topology> FromSynthetic(const std::string& description);
  // An XML file written by `lstopo file.xml` or hwloc_topology_export_xml.
  static absl::StatusOr<Topology> FromXml(const std::string& path);
  // This machine, PCI devices included (to find the GPUs).
  static absl::StatusOr<Topology> ThisMachine();

  // The OS index of the NUMA node nearest to each NVIDIA GPU (PCI vendor
  // 0x10de, display or 3D class), in PCI bus order (CUDA's order under
  // CUDA_DEVICE_ORDER=PCI_BUS_ID); -1 for a GPU hwloc places nowhere.
  std::vector<int> NvidiaGpuNumaNodes() const;

  hwloc_topology* get() const { return topo_; }

 private:
  explicit Topology(hwloc_topology* topo) : topo_(topo) {}
  hwloc_topology* topo_ = nullptr;
};

// Places local rank i near the NUMA node `gpu_numa_node[i]` (an OS index)
// in `mode`. FAILED_PRECONDITION when a node is not in the topology, when
// kExclusive has fewer cores than ranks on a node, or when kCoreComplex
// finds no L3 cache on a node; each message names the node and the mode.
// Pure over the topology.
absl::StatusOr<std::vector<NumaPlacement>> PlaceRanks(const Topology& topology, NumaMode mode,
                                                      const std::vector<int>& gpu_numa_node);

// The placements for `nproc` local ranks on this machine: GPU i is the
// i-th GPU in PCI bus order, or the i-th entry of `cuda_visible_devices`
// (numeric indices only) when set. FAILED_PRECONDITION with a one-line
// message when there is no GPU, fewer GPUs than nproc, or a device entry
// that is not an index.
absl::StatusOr<std::vector<NumaPlacement>> PlaceOnThisMachine(NumaMode mode, int nproc,
                                                              const std::optional<std::string>& cuda_visible_devices);

}  // namespace meshrun::launcher
