// meshrun: the launcher's entry point. Dispatches `meshrun server ...` to the
// daemon; everything else is torchrun's command line.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/synchronization/mutex.h"
#include "agent/process.h"
#include "agent/signal_policy.h"
#include "common/logging.h"
#include "launcher/launch.h"
#include "launcher/launch_config.h"
#include "launcher/server_cmd.h"
#include "launcher/status_cmd.h"

int main(int argc, char** argv) {
  // Debian's Abseil is built without NDEBUG, which leaves absl::Mutex's
  // deadlock detection on: every lock taken while another is held updates
  // one global lock graph under one global lock. In a server with 10,000
  // agents that was 18% of its CPU time (bench/rdzv_scale, perf). A release
  // build of meshrun turns it off, as Abseil itself does in release builds;
  // a debug build (and the unit tests, which do not run this main) keep it.
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  if (argc > 1 && std::strcmp(argv[1], "mesh") == 0) return meshrun::launcher::MeshMain(argc - 1, argv + 1);
  if (argc > 1 && std::strcmp(argv[1], "status") == 0) return meshrun::launcher::StatusMain(argc - 1, argv + 1);
  if (argc > 1 && std::strcmp(argv[1], "server") == 0) {
    meshrun::agent::BlockSignals({SIGTERM, SIGINT, SIGHUP});
    return meshrun::launcher::ServerMain(argc - 1, argv + 1);
  }
  // Before anything changes a disposition: what meshrun's parent ignored
  // (nohup's SIGHUP) stays ignored, for meshrun and for its workers.
  meshrun::agent::RecordInheritedDispositions();
  meshrun::launcher::ParseOutcome parsed = meshrun::launcher::ParseCommandLine(argc, argv);
  if (!parsed.config) return parsed.exit_code;
  // Before any thread (gRPC's included) starts: every thread inherits the
  // mask and only the agent's signal thread receives these signals.
  std::vector<int> ignored;
  auto& handled = parsed.config->agent.forwarded_signals;
  handled = meshrun::agent::WithoutInheritedIgnored(handled, &ignored);
  for (int s : ignored) {
    meshrun::Logger("launcher")->info("{} was ignored when meshrun started (nohup?); it stays ignored, for the workers too",
                                      meshrun::agent::SignalName(s));
  }
  meshrun::agent::BlockSignals(handled);
  int code = meshrun::launcher::Launch(std::move(*parsed.config));
  // Leave without running static destructors: gRPC's background threads may
  // still be winding down, and tearing down its globals under them can abort.
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);
}
