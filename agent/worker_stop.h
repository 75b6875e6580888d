// Stopping this node's workers (docs/design.md §4a): the stop signal goes to each
// worker's main process only; after the grace period everything left below
// the agent (the workers' process groups, their helpers that left the group,
// orphans reparented to the agent, a child subreaper) is killed.
//
// Why not the whole group at once, as torchrun 2.x does (os.killpg): a
// trainer that catches SIGTERM to finish its step and save a checkpoint
// needs its DataLoader worker processes alive meanwhile; a group-wide
// SIGTERM kills them and the save fails (KempnerInstitute/KempnerForge#177).
#pragma once

#include <sys/types.h>

#include <deque>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/events.h"

namespace meshrun::agent {

// One worker of the current round: `pid` is the process meshrun started
// (meshrun-worker-shim, which passes the agent's signals on to the program,
// or the program itself when the shim is missing); it leads the worker's
// process group.
struct Worker {
  int local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  // Still running when meshrun began to stop the workers (the failure
  // summary counts these apart from those that had exited on their own).
  bool stopped = false;
  int status = 0;
  std::string error_file;
};

// Sends `signo` to every running worker's main process (through its shim).
// Not to the rest of its group. Thread-compatible.
void SignalMains(const std::vector<Worker>& workers, int signo);

// Makes this process a child subreaper (PR_SET_CHILD_SUBREAPER), so that
// processes the workers leave behind are reparented to it and can be found
// and stopped. Call once before the first worker starts.
void BecomeSubreaper();

// Stops `workers` and everything below this process:
//  1. `signo` to each running worker's main process (SignalMains; 0: the
//     caller signalled them already);
//  2. waits up to `grace` for every worker to exit, taking ChildExit events
//     from `q`. A signal that stops the job cuts the wait short (skip to
//     SIGKILL) when this stop was itself started by one (`by_signal`: "a
//     second signal"), or when it is the second during this stop. Else (a
//     restart, a lost server: every node of a job told to stop at once by
//     scancel or a pod deletion sees its server go before its own SIGTERM)
//     it does not cut the workers' grace: it is kept in `deferred` for the
//     caller, and returned. A pass-through signal (SIGUSR1, ...) goes to the
//     main processes. Other events go to `deferred`, in order;
//  3. when every worker exited in time, what is left below this process gets
//     SIGTERM and the rest of `grace`; else (or after that) SIGKILL;
//  4. waits up to 10 s for the workers' exits after SIGKILL.
// Marks each worker not running, with its wait status. Returns the stop
// signal kept in `deferred` (0: none). Call from the agent's one thread.
// Bounded by grace + about 12 s.
int StopWorkers(std::vector<Worker>& workers, int signo, absl::Duration grace, bool by_signal, EventQueue& q,
                std::deque<Event>& deferred);

// End of job: stops what the workers left behind below this process (e.g.
// `sleep 1000 &` of a worker that exited 0): SIGTERM, up to `grace`, then
// SIGKILL. Returns how many processes there were. With `keep` nothing is
// signalled and the count is returned. Call after every worker has exited.
int StopLeftovers(absl::Duration grace, bool keep);

}  // namespace meshrun::agent
