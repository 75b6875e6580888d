// Reads a rendezvous server's status: per-method request counters.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/security.h"

namespace meshrun {

// Requests served per method name ("KvGet", "Join", ...) by the server at
// `endpoint` since it started. UNAVAILABLE when unreachable; UNAUTHENTICATED
// with a wrong token. Blocking, bounded by 10 s. `tls`: TLS when
// tls.client_tls() (as the agent's client); an unreachable server is probed
// once so the error names a TLS mismatch (see ProbeTlsMismatch).
absl::StatusOr<std::map<std::string, int64_t>> QueryRequestCounts(const std::string& endpoint,
                                                                  const std::string& token,
                                                                  const TlsMaterial& tls = {});

}  // namespace meshrun
