// Which signals meshrun handles and what each one does (torchrun's
// --signals_to_handle, docs/design.md §4a).
#pragma once

#include <vector>

namespace meshrun::agent {

// meshrun's default --signals_to_handle: torchrun's SIGTERM, SIGINT, SIGHUP,
// SIGQUIT plus SIGUSR1 and SIGUSR2, which schedulers (Slurm's
// --signal=USR1@120) send as a preemption notice; torchrun 2.x leaves those
// out, so its workers never see them (pytorch/pytorch#154849).
std::vector<int> DefaultHandledSignals();

// Signals that are only passed on to the workers' main processes; the job
// keeps running: SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT. Every other handled
// signal stops the job (torchrun stops on every handled signal).
bool PassThrough(int signo);

// Records which signals are ignored (SIG_IGN) right now, as meshrun found
// them (nohup ignores SIGHUP). Call once in main() before anything changes a
// disposition (gRPC ignores SIGPIPE when it starts). Not thread-safe.
void RecordInheritedDispositions();

// True when `signo` was ignored when RecordInheritedDispositions ran.
// Async-signal-safe (reads a sigset), so Spawn's child may call it.
bool IgnoredAtStart(int signo);

// `handled` without SIGHUP when it was ignored at start: a meshrun started
// under nohup keeps SIGHUP ignored, and its workers inherit the ignored
// disposition, as it found it (a dropped SIGHUP goes to *dropped). Every
// other handled signal that arrived ignored (a script's background job has
// SIGINT and SIGQUIT ignored) is taken back: its disposition is reset to
// the default here, so that meshrun handles it and its workers start with
// the default too, as torchrun 2.x stops on SIGINT there. Call once, in
// main(), before any thread starts. Not thread-safe.
std::vector<int> WithoutInheritedIgnored(const std::vector<int>& handled, std::vector<int>* dropped);

}  // namespace meshrun::agent
