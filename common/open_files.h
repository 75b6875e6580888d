// The open-files limit (RLIMIT_NOFILE). A rendezvous server holds one
// connection, so one descriptor, per agent; the common soft limit of 1,024
// runs out at about 1,000 agents. meshrun (server, daemon and agent)
// raises its own soft limit to the hard limit at start, as systemd, Go and
// nginx do for themselves; torchrun does not. Workers get back the soft
// limit meshrun started with (programs that use select() or loop over
// every descriptor up to the limit expect the usual value).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshrun {

struct OpenFilesLimit {
  uint64_t soft_at_start = 0;  // The soft limit before RaiseOpenFilesLimit.
  uint64_t soft = 0;           // The soft limit now.
  uint64_t hard = 0;           // The hard limit (RLIM_INFINITY as UINT64_MAX).
};

// Raises this process's soft RLIMIT_NOFILE to its hard limit (to
// /proc/sys/fs/nr_open when the hard limit is unlimited) and remembers the
// soft limit it started with (OpenFilesSoftLimitAtStart). Returns the
// limits; the POSIX error of getrlimit/setrlimit naming the call otherwise
// (then nothing changed). Call early at start; a second call raises again
// and keeps the first starting figure. Thread-safe.
absl::StatusOr<OpenFilesLimit> RaiseOpenFilesLimit();

// RaiseOpenFilesLimit for a command's start: the figures logged at debug on
// `logger` (common/logging.h), a failure a warning there (not fatal:
// nullopt).
std::optional<OpenFilesLimit> RaiseOpenFilesLimitOrWarn(const char* logger);

// The limits now (soft_at_start as OpenFilesSoftLimitAtStart, or the soft
// limit when it was never raised). The POSIX error of getrlimit otherwise.
// Thread-safe.
absl::StatusOr<OpenFilesLimit> CurrentOpenFilesLimit();

// The soft limit this process started with, for its children; 0 when
// RaiseOpenFilesLimit has not changed it. A plain read: safe between fork
// and exec.
uint64_t OpenFilesSoftLimitAtStart();

// Sets the soft RLIMIT_NOFILE back to OpenFilesSoftLimitAtStart() when it
// was raised. Only async-signal-safe calls: for a child between fork and
// exec.
void RestoreOpenFilesLimitInChild();

// Descriptors in use here now (entries of /proc/self/fd), or -1 when that
// cannot be read (also when no descriptor is left to read it with: EMFILE).
// O(open descriptors). Thread-safe.
int64_t OpenDescriptorCount();

// How many descriptors, up to `up_to`, this process can open right now:
// takes them (opens /dev/null) and gives them back at once. Needs no free
// descriptor to answer 0. O(up_to). Thread-safe, but for that instant
// other threads have `up_to` fewer.
int64_t FreeDescriptors(int64_t up_to);

// Descriptors a meshrun needs: one per agent connection to the rendezvous
// server it hosts (`agents`: --nnodes MAX, 0 when it hosts none), a few
// per local worker (output pipes, pidfd: `workers`), and a margin of 64
// for gRPC, logs and its own connection. Pure.
uint64_t DescriptorsNeeded(int64_t agents, int64_t workers);

// One line saying that `limit.soft` is below `needed` (what `need_for`
// describes, e.g. "a rendezvous server for --nnodes MAX=2000"), what
// happens when descriptors run out, and how to raise the hard limit; empty
// when the limit suffices. Pure.
std::string OpenFilesWarning(const OpenFilesLimit& limit, uint64_t needed, absl::string_view need_for);

}  // namespace meshrun
