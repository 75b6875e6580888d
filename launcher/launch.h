// Runs a parsed `meshrun` command: hosts the rendezvous server when this
// node should, then runs the node agent.
#pragma once

#include <string>

#include "launcher/launch_config.h"
#include "meshrun/mesh_layout.h"

namespace meshrun::launcher {

// Returns meshrun's exit code (see docs/user-guide.md, "Exit codes").
// Call from main() after agent::BlockSignals(config.agent.forwarded_signals).
int Launch(LaunchConfig config);

// The text `meshrun mesh` prints for `layout` on `nnodes` x `nproc` ranks.
std::string DescribeMesh(const mesh::MeshLayout& layout, int nnodes, int nproc);

// `meshrun mesh --nnodes N --nproc_per_node P --shape 2,4 --names a,b`:
// prints the mesh as a grid of ranks with node and local rank, the groups of
// every dimension, and which dimensions stay inside a node. No network.
// Exit 2 on a bad shape.
int MeshMain(int argc, char** argv);

}  // namespace meshrun::launcher
