// Parsing and formatting of rendezvous endpoints ("host:port").
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace meshrun {

// "host:port", with an IPv6 address in brackets ("[::1]:29400"); also a
// valid gRPC target. The one formatter of host and port. Pure.
std::string HostPort(absl::string_view host, int port);

struct Endpoint {
  std::string host;  // A name, an IPv4 address or an IPv6 address (no brackets).
  int port = 0;      // 0..65535.

  // "host:port", with IPv6 addresses in brackets ("[::1]:29400"); this form
  // is also a valid gRPC target.
  std::string ToString() const;
  bool IsIpv6Literal() const;
};

// Parses "host:port", "1.2.3.4:port", "[v6]:port", or a bare host, which gets
// `default_port` (torchrun's c10d default is 29400). Errors
// (INVALID_ARGUMENT, naming the value and the allowed forms): an empty
// string, an unbracketed IPv6 address ("ambiguous"), a port that is not an
// integer in 0..65535, empty host. No DNS lookup is made. Mirrors torchrun's
// parse_rendezvous_endpoint, but stricter on IPv6.
absl::StatusOr<Endpoint> ParseEndpoint(absl::string_view text, int default_port);

}  // namespace meshrun
