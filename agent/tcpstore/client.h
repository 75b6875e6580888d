// A minimal TCPStore client (PyTorch 2.x's dialect, protocol.h): what a
// static-backend agent uses to read one key from node rank 0's agent store
// before it can reach the rendezvous server.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace meshrun::agent::tcpstore {

// Connects to host:port (a name or a numeric address) and returns the
// value GET answers for `key`, trying again (backing off to 1 s) until
// `timeout` while the connection is refused, closed unanswered or the value
// is empty (node rank 0 may start later, or not host yet).
// DEADLINE_EXCEEDED naming host:port and the last reason when no value came
// in time; NOT_FOUND when `host` does not resolve. Thread-safe.
absl::StatusOr<std::string> GetKey(const std::string& host, int port, const std::string& key,
                                   absl::Duration timeout);

}  // namespace meshrun::agent::tcpstore
