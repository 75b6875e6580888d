// Fuzz target: ParseUrl (rendezvous/state/etcd/client/etcd_url.h), the replicated
// server's --state etcd://... parser. A parsed URL keeps its promises (1 to
// 32 members with a host and a port in 1..65535, a prefix that starts with
// '/' and does not end with one) and prints back to text that parses to the
// same URL; a refused one gets one INVALID_ARGUMENT line naming the value.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "rendezvous/state/etcd/client/etcd_url.h"

namespace etcd = meshrun::rendezvous::state::etcd;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<etcd::Url> url = etcd::ParseUrl(text);
  if (!url.ok()) {
    const std::string m(url.status().message());
    if (url.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    if (m.find('\n') != std::string::npos || m.rfind("invalid --state URL '", 0) != 0) std::abort();
    return 0;
  }
  if (url->members.empty() || url->members.size() > static_cast<size_t>(etcd::kMaxMembers)) std::abort();
  for (const auto& m : url->members) {
    if (m.host.empty() || m.port < 1 || m.port > 65535) std::abort();
  }
  const std::string& p = url->prefix;
  if (p.size() < 2 || p.front() != '/' || p.back() == '/' || p.size() > static_cast<size_t>(etcd::kMaxPrefixBytes)) {
    std::abort();
  }
  absl::StatusOr<etcd::Url> again = etcd::ParseUrl(url->ToString());
  if (!again.ok() || again->ToString() != url->ToString() || again->tls != url->tls ||
      again->members.size() != url->members.size() || again->prefix != url->prefix) {
    std::abort();
  }
  return 0;
}
