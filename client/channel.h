// Connections to a rendezvous server (or to a node's store proxy), the one
// place where meshrun's clients make gRPC channels: the agent's
// RendezvousClient, `meshrun status`, and the Store over gRPC that workers
// use (client/grpc_store.h). TLS and the token come from client/auth.h.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/endpoint.h"
#include "common/net.h"
#include "common/security.h"

namespace grpc {
class Channel;
}

namespace meshrun::client {

// The largest answer a client accepts, bytes: every channel that reads the
// store (a worker's, and an agent's, which carries its proxy's reads) sets
// it as its maximum receive message size. gRPC's default, 4 MiB, is too
// small for a large mesh's agreement: its first member reads every member's
// description (libmesh's Encode: about 115-125 bytes each, so 32,768
// members are 3.7 MiB and about 33,000 fill 4 MiB). A read answers at most
// one run's store, which the server bounds (max_store_bytes_per_run, 64 MiB
// by default), so this is that plus room for framing. A larger answer fails
// RESOURCE_EXHAUSTED.
inline constexpr int kMaxStoreAnswerBytes = (64 << 20) + (1 << 20);

// True for "unix:..." endpoints (a node's store proxy). Pure.
bool IsUnixEndpoint(absl::string_view endpoint);
// OK for "unix:/absolute/path"; INVALID_ARGUMENT naming the endpoint
// otherwise. Pure.
absl::Status CheckUnixEndpoint(absl::string_view endpoint);

// How a channel behaves once made.
struct ChannelSettings {
  // A connection of this channel's own. Without it gRPC shares one
  // connection among a process's channels with the same target and
  // settings (its global subchannel pool), so several clients in one
  // process (bench/rdzv_scale's simulated agents) would be one connection
  // to the server.
  bool own_connection = false;
  // HTTP/2 keepalive: a ping after this long without traffic, the
  // connection dropped when the answer takes longer than keepalive_timeout.
  // Zero: gRPC's default (no pings).
  absl::Duration keepalive_time = absl::ZeroDuration();
  absl::Duration keepalive_timeout = absl::ZeroDuration();
  // Reconnect back-off after a lost connection (gRPC's default is 1 s up
  // to 120 s: far too slow to notice a server that came back).
  absl::Duration initial_reconnect_backoff = absl::Milliseconds(100);
  absl::Duration max_reconnect_backoff = absl::Seconds(1);
  // Largest message received, bytes.
  int max_receive_bytes = kMaxStoreAnswerBytes;
};

// A gRPC channel to `target`, the only way meshrun makes one: a gRPC target
// ("ipv4:1.2.3.4:5", "host:port", "unix:/path"), never through an HTTP
// proxy. When tls.client_tls(), SSL verifying the server against tls.ca_pem
// and the name `tls_host` (the host the user gave, although the channel may
// dial a numeric address), presenting tls.cert/key when set; plain
// otherwise ("unix:" targets are always plain: they reach this node's store
// proxy, which holds the credentials). Does not connect. Thread-safe.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& target, const std::string& tls_host,
                                          const TlsMaterial& tls, const ChannelSettings& settings = {});

// How Dial waits for the server.
struct DialOptions {
  // The whole wait: the server's host accepting TCP, then the gRPC channel
  // (TLS handshake included) becoming ready.
  absl::Duration timeout = absl::Seconds(10);
  // true: keep trying while nothing listens (an agent whose server is not
  // up yet, for up to read_timeout). false: a refused connection fails at
  // once, UNAVAILABLE "connection refused" (`meshrun status`).
  bool wait_for_server = true;
  // While waiting for the server: a warning every 15 s after the first 5 s,
  // naming this as what bounds the wait (e.g. "read_timeout"); empty: none.
  std::string wait_bound_name;
  // Checked at least every 100 ms while waiting: a non-OK status ends the
  // wait and is returned (a signal that stops meshrun). Null: never.
  std::function<absl::Status()> interrupted;
  ChannelSettings channel;
  // The name the server's TLS certificate is checked against; empty: the
  // endpoint's host. For a replica dialled by one of its name's addresses
  // (RendezvousClient::Connect, one DNS name with several addresses).
  std::string tls_name;
};

// A ready channel to a server, and how it was reached.
struct Connection {
  std::shared_ptr<grpc::Channel> channel;
  // The endpoint as given ("host:port"; the host as the user wrote it).
  std::string endpoint;
  // The numeric address dialed and the local (source) address of that
  // connection; empty for a "unix:" endpoint.
  TcpRoute route;
};

// Connects to `endpoint`: "host:port" ([v6]:port; default port 29400) or
// "unix:/abs/path" (a node's store proxy). A TCP endpoint is resolved here
// and the channel dials the numeric address that accepted a TCP connection
// (IPv4 first), so that route.remote is an address this client really
// reached the server on. Returns once the channel is READY.
// Errors, each one line naming the endpoint:
//   INVALID_ARGUMENT  a malformed endpoint;
//   UNAVAILABLE       unreachable within options.timeout (the addresses
//                     tried and their errors), refused when
//                     !options.wait_for_server, or a TLS mismatch (plain
//                     against TLS, an unknown CA, an expired or wrong-host
//                     certificate, a missing client certificate: probed at
//                     the first failed handshake with ProbeTlsMismatch, so
//                     it fails then rather than at the timeout);
//   what options.interrupted returned.
// Blocking; thread-safe.
absl::StatusOr<Connection> Dial(const std::string& endpoint, const TlsMaterial& tls, const DialOptions& options);

// Why the server at `ep` cannot be reached with `tls`, as a phrase (see
// ProbeTlsMismatch, one probe of its first address bounded by `timeout`),
// or "" when the probe finds nothing wrong (or the host does not resolve).
// Blocking; thread-safe.
std::string TlsMismatchCause(const Endpoint& ep, const TlsMaterial& tls, absl::Duration timeout = absl::Seconds(5));

}  // namespace meshrun::client
