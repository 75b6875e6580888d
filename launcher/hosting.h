// Which meshrun on a host serves an endpoint's port (docs/design.md sections 2
// and 4b): decided per network namespace, never through a file in a shared
// temporary folder (containers and namespaces often share /tmp).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshrun::launcher {

// The right to host port `port`'s rendezvous server on an address in this
// network namespace: a bound abstract Unix socket, "meshrun-host-<port>"
// for a server on every address, "meshrun-host-<port>-<address>" for one on
// one address (as torchrun's store on 127.0.0.1:P and another on [::1]:P
// both run). Abstract sockets belong to the network namespace and vanish
// with the process that holds them (no stale lock after a crash).
// Move-only; the claim is released when destroyed.
class HostClaim {
 public:
  // Takes the claim for `host` (the numeric address the server binds; "",
  // "::" or "0.0.0.0": every address). ALREADY_EXISTS when another process
  // of this network namespace holds it, or, for one address, holds the
  // every-address claim; the message names that process (pid and command,
  // from /proc/net/unix and /proc) when it can be found; no connection is
  // made to the holder (none could queue on it). A claim on every
  // address does not see claims on one address: then the TCP bind decides.
  // Other errors (e.g. no Unix sockets) come back as their POSIX status;
  // the caller may then let the TCP bind decide. Thread-safe.
  static absl::StatusOr<HostClaim> Take(int port, absl::string_view host);

  HostClaim(HostClaim&& other) noexcept;
  HostClaim& operator=(HostClaim&& other) noexcept;
  HostClaim(const HostClaim&) = delete;
  HostClaim& operator=(const HostClaim&) = delete;
  ~HostClaim();

 private:
  explicit HostClaim(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace meshrun::launcher
