// Reads a rendezvous server's status: per-method request counters.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace meshrun {

// Requests served per method name ("KvGet", "Join", ...) by the server at
// `endpoint` since it started. UNAVAILABLE when unreachable; UNAUTHENTICATED
// with a wrong token. Blocking, bounded by 10 s.
absl::StatusOr<std::map<std::string, int64_t>> QueryRequestCounts(const std::string& endpoint,
                                                                  const std::string& token);

}  // namespace meshrun
