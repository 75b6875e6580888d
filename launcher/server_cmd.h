// `meshrun server`: the rendezvous server as a daemon (flags -> ServerOptions).
#pragma once

#include <string>

namespace meshrun::launcher {

// `meshrun server [flags]`: runs until SIGTERM, SIGINT or SIGHUP, then shuts
// down within --shutdown_grace seconds (exit 0). Exit 2 on a bad flag, a bad
// token file or TLS files (one line naming it); 1 when it cannot serve (the
// port is taken). Call from main() with SIGTERM, SIGINT and SIGHUP blocked.
int ServerMain(int argc, char** argv);

}  // namespace meshrun::launcher
