// The Store implemented over the rendezvous server's key-value service.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/channel.h"
#include "common/security.h"
#include "common/store.h"

namespace meshrun::client {


struct GrpcStoreOptions {
  // "host:port" (or "[v6]:port") of the rendezvous server, or
  // "unix:/abs/path", the Unix socket of this node's store proxy (what
  // meshrun gives its workers: agent/store_proxy/store_proxy.h). Through the proxy the
  // token and TLS below are not used: the agent adds its own.
  std::string endpoint;
  // The run whose store is used (MESHRUN_RUN_ID / TORCHELASTIC_RUN_ID).
  std::string run_id;
  // The round that scopes every key (MESHRUN_ROUND). Keys of other rounds
  // are invisible.
  int64_t round = 0;
  // Sent with every request; must match the server's MESHRUN_TOKEN.
  std::string token;
  // TLS to the server (MESHRUN_TLS_*): used when tls.client_tls(). A
  // connection that fails is probed once so the error names a TLS mismatch.
  TlsMaterial tls;
  // How long ConnectGrpcStore waits for the connection to the server to
  // become ready.
  absl::Duration connect_timeout = absl::Seconds(30);
  // false: ConnectGrpcStore returns at once and the connection comes up in
  // the background, overlapping whatever the caller does next; until it has
  // answered once, every call waits for it (gRPC wait_for_ready) within the
  // call's own deadline, and one that cannot reach the server by then fails
  // with UNAVAILABLE naming the endpoint. connect_timeout is then unused.
  bool wait_for_connection = true;
  // Set: the store uses this channel as it is (the agent's in-process
  // channel to its own store proxy, StoreProxy::InProcessChannel) and
  // `endpoint` (the proxy's "unix:" one) only names it in messages;
  // connect_timeout and wait_for_connection are then unused.
  std::shared_ptr<grpc::Channel> channel;
  // Extra deadline on top of a call's own wait, for the round trip.
  absl::Duration rpc_slack = absl::Seconds(10);
};

// Connects to the server, or to the node's store proxy for a "unix:"
// endpoint (waiting up to options.connect_timeout, unless
// options.wait_for_connection is false) and returns the store. UNAVAILABLE
// naming the endpoint when it cannot be reached (a proxy whose agent has
// died: at once, not at a timeout, once the store has answered a call);
// INVALID_ARGUMENT for a malformed endpoint. The returned store is
// thread-safe; every call is one RPC (MultiGet/MultiSet/Wait are one RPC for
// all their keys).
absl::StatusOr<std::shared_ptr<Store>> ConnectGrpcStore(const GrpcStoreOptions& options);

// Builds the options from a worker's environment (MESHRUN_STORE_ENDPOINT,
// MESHRUN_RUN_ID, MESHRUN_ROUND; for a "host:port" endpoint, i.e. a worker
// started by hand against the server, also MESHRUN_TOKEN or
// MESHRUN_TOKEN_FILE and MESHRUN_TLS_CERT/KEY/CA). FAILED_PRECONDITION
// naming the missing variable when the process was not started by meshrun;
// the errors of ResolveToken and LoadTls (common/security.h) for a bad token
// file or TLS file.
absl::StatusOr<GrpcStoreOptions> GrpcStoreOptionsFromEnv();

// True for "unix:..." store endpoints (the node's store proxy). Pure.
bool IsUnixStoreEndpoint(absl::string_view endpoint);

}  // namespace meshrun::client
