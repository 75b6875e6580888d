// Runs a parsed `meshrun` command: hosts the rendezvous server when this
// node should, then runs the node agent.
#pragma once

#include "launcher/launch_config.h"

namespace meshrun::launcher {

// Returns meshrun's exit code (see docs/user-guide.md, "Exit codes").
// Call from main() after agent::BlockSignals(config.agent.forwarded_signals).
int Launch(LaunchConfig config);

// `meshrun server [flags]`: the rendezvous server as a daemon. Runs until
// SIGTERM or SIGINT, then shuts down within --shutdown_grace seconds.
int ServerMain(int argc, char** argv);

}  // namespace meshrun::launcher
