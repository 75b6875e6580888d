// Fuzz target: ParseEndpoint (common/endpoint.h), the --rdzv_endpoint and
// --master_addr:--master_port parser. A parsed endpoint must print back to
// text that parses to the same endpoint.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/endpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto ep = meshrun::ParseEndpoint(text, 29400);
  if (!ep.ok()) return 0;
  if (ep->port < 0 || ep->port > 65535 || ep->host.empty()) std::abort();
  auto again = meshrun::ParseEndpoint(ep->ToString(), 1);
  if (!again.ok() || again->host != ep->host || again->port != ep->port) std::abort();
  return 0;
}
