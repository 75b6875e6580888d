// `meshrun server`: the rendezvous server as a daemon (flags -> ServerOptions).
#pragma once

#include <functional>
#include <string>

#include "rendezvous/state/serving_gate.h"
#include "rendezvous/state/state.h"

namespace meshrun::launcher {

// Seams between a replica (--state) and the server it feeds, for tests that
// make a replica misbehave on purpose and check that the suite notices
// (tests/jepsen/). `meshrun server` passes none: the server writes to the
// replica's journal and reads the replica's gate. Each function is called
// once, before the server starts, with what the replica made; what it
// returns must live as long as the process.
struct ReplicaSeams {
  // The journal the server saves to, given the replica's.
  std::function<rendezvous::state::RunJournal*(rendezvous::state::RunJournal*)> journal;
  // The gate the server admits calls by, given the one the replica drives.
  std::function<const rendezvous::state::ServingGate*(const rendezvous::state::ServingGate*)> gate;
};

// `meshrun server [flags]`: runs until SIGTERM, SIGINT or SIGHUP, then shuts
// down within --shutdown_grace seconds (exit 0). Exit 2 on a bad flag, a bad
// token file or TLS files (one line naming it); 1 when it cannot serve (the
// port is taken). Call from main() with SIGTERM, SIGINT and SIGHUP blocked.
// `seams`: see ReplicaSeams (tests only).
int ServerMain(int argc, char** argv, const ReplicaSeams& seams = {});

}  // namespace meshrun::launcher
