// Small socket helpers: local addresses and free ports. No DNS reverse lookups.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/endpoint.h"

namespace meshrun {

// A gRPC peer string's parts, viewing into that string.
struct PeerParts {
  int family = 0;             // AF_INET or AF_INET6.
  absl::string_view address;  // As written, without brackets; an IPv6 zone stays in it ("fe80::1%25eth0").
  uint16_t port = 0;
};
// Splits the peer strings gRPC writes for TCP connections: "ipv4:a.b.c.d:port"
// and "ipv6:[addr]:port" (gRPC 1.51 writes the brackets percent-encoded:
// "ipv6:%5B::1%5D:40000"). nullopt for any other form ("unix:/path", no port,
// a port above 65535); the address itself is not validated. The one parser of
// peer strings: wire::PeerIp and the server's traffic counters use it. Pure; does
// not allocate.
std::optional<PeerParts> SplitPeer(absl::string_view grpc_peer);

// Resolves `host` (name or literal) to numeric addresses, IPv4 first.
// NOT_FOUND naming the host when it does not resolve. Thread-safe.
absl::StatusOr<std::vector<std::string>> ResolveNumeric(const std::string& host);

// Returns the numeric local address this machine uses to reach `ep` (the
// source address of a UDP "connect"; no packet is sent). Thread-safe.
absl::StatusOr<std::string> LocalAddressFor(const Endpoint& ep);

// Returns a TCP port that is free on `addr` right now (bind to port 0, read
// the port, close). Racy by nature, as torchrun's get_free_port.
absl::StatusOr<int> FindFreePort(const std::string& addr);

// True when a TCP socket is listening on `addr`:`port` here (a bind with
// SO_REUSEADDR fails with EADDRINUSE). `addr` numeric, "::" or "0.0.0.0".
bool PortInUse(const std::string& addr, int port);

// True when `addr` (numeric) is a loopback address (127.0.0.0/8 or ::1).
bool IsLoopback(const std::string& addr);

// True when `host` names this machine: localhost, a loopback literal, the
// hostname, or an address assigned to one of its interfaces.
bool IsLocalHost(const std::string& host);

// True for "localhost", "localhost.localdomain" and loopback literals.
bool IsLoopbackName(const std::string& host);

// The name of the network interface here that holds `addr` (numeric), e.g.
// "eth0", or "lo" for a loopback address. NOT_FOUND naming the address when
// no interface holds it. Used for GLOO_SOCKET_IFNAME. Thread-safe.
absl::StatusOr<std::string> InterfaceOf(const std::string& addr);

// One TCP connection that succeeded: the numeric address dialed and the
// local (source) address the connection came from.
struct TcpRoute {
  std::string remote;
  std::string local;
};

// Resolves `ep.host` (IPv4 first) and connects over TCP to each address in
// turn, each attempt bounded by `attempt_timeout`; returns the first that
// accepts (the connection is closed at once). When a later address accepts,
// the earlier ones are tried once more and the first of them that accepts
// now wins (a server that came up meanwhile is dialed at the preferred
// address, so the choice does not depend on timing). UNAVAILABLE naming every
// address tried and its error (e.g. "connection refused") otherwise;
// NOT_FOUND when the name does not resolve. Thread-safe.
absl::StatusOr<TcpRoute> ProbeTcp(const Endpoint& ep, absl::Duration attempt_timeout);

// The gRPC target for a numeric address and port: "ipv4:1.2.3.4:5" or
// "ipv6:[fd00::1]:5".
std::string NumericTarget(const std::string& addr, int port);

// The machine's hostname (gethostname).
std::string Hostname();

}  // namespace meshrun
