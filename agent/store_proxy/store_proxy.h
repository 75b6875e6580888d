// A node's store proxy (docs/design.md section 1 item 6): the agent serves the
// store API (the KV methods of rendezvous.proto's Rendezvous service, so a
// worker's GrpcStore works unchanged) to its own workers on a Unix-domain
// socket, and forwards to the server over the agent's one connection, with
// the agent's token, TLS and node id. Workers then need no token and the
// server sees one connection per node, not one per worker. The domain
// (coalescing, the round's write-once values) is StoreCache
// (store_cache.h), whose server requests StoreBatcher (store_batcher.h)
// sends in as few calls as it can; this is the gRPC adapter on the workers'
// side, and GrpcUpstream (store_upstream.h) on the server's.
//
// Access control is the socket's directory: a fresh mkdtemp directory of
// mode 0700 owned by the agent's user, so only that user (the workers the
// agent starts run as it) can connect. It is removed when the proxy is
// destroyed; the agent's death closes the socket, so workers' calls fail at
// once with UNAVAILABLE rather than at a timeout. A killed agent's folder is
// removed by the next proxy of the same user (SweepStaleProxyDirs).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/store_proxy/store_batcher.h"
#include "agent/store_proxy/store_cache.h"

namespace grpc {
class Channel;
class Server;
}  // namespace grpc

namespace meshrun::agent {

struct StoreProxyOptions {
  std::string run_id;  // The node's run: the cache serves its round's write-once keys.
  // A second run it serves, uncached, or empty: the run of the job's
  // lighthouse (a store-only run), whose store the replica groups of a job
  // share (libmesh's fault-tolerance manager builds each quorum's mesh
  // there; the workers find it in MESHRUN_LIGHTHOUSE_RUN_ID). Any other run
  // is refused PERMISSION_DENIED.
  std::string shared_run_id;
  std::string token;   // Sent to the server on every request (MESHRUN_TOKEN).
  StoreCacheOptions cache;
  // Which requests share a server call (store_batcher.h): the agent sets
  // batch.expected_publishers to --nproc_per_node and batch.publication_hold
  // from rdzv_conf store_proxy_batch_hold.
  StoreBatcherOptions batch;
  // Largest worker request accepted, bytes (rdzv_conf
  // store_proxy_max_message_bytes; gRPC's default is 4 MiB).
  int64_t max_message_bytes = 4 << 20;
  // How long a request kept for the next leader waits for one before it
  // is sent again on the current connection (rdzv_conf
  // leader_resend_interval; GrpcUpstream).
  absl::Duration kept_retry = absl::Seconds(1);
  // Where the private directory goes: empty for $TMPDIR, else /tmp (also
  // when the socket's path would not fit a Unix socket address, 107 bytes).
  std::string dir_base;
};

// Removes the folders that store proxies of this user left under `base`
// when their agent was killed (a SIGKILLed process cannot clean up):
// "meshrun-store-*" folders owned by this user, unchanged for `min_age`,
// whose socket nobody listens on. Returns how many went. StoreProxy::Start
// calls it (60 s); looks at 100000 entries at most. Never fails.
int SweepStaleProxyDirs(const std::string& base, absl::Duration min_age);

class StoreProxy {
 public:
  // Makes the private directory, listens on <dir>/store.sock and serves.
  // `server`: the agent's channel to the rendezvous server (shared; reused,
  // not reconnected); `node_id`: sent with every forwarded request (the
  // "meshrun-node" metadata) so the server counts requests per node.
  // FAILED_PRECONDITION naming the directory when it cannot be made or the
  // socket cannot be bound. Workers are told endpoint().
  static absl::StatusOr<std::unique_ptr<StoreProxy>> Start(StoreProxyOptions options,
                                                           std::shared_ptr<grpc::Channel> server,
                                                           std::string node_id);
  // Stops serving (workers' calls in flight end CANCELLED, their server
  // requests are cancelled), waits for them (at most a few seconds) and
  // removes the directory.
  ~StoreProxy();

  // "unix:<dir>/store.sock", what workers get as MESHRUN_STORE_ENDPOINT.
  const std::string& endpoint() const { return endpoint_; }
  // A channel to this proxy inside the agent's own process (gRPC's
  // in-process transport: no socket, no HTTP/2 framing), for the agent's
  // own store clients (its TCPStore-protocol store, agent/tcpstore): the
  // same service and answers as endpoint()'s, for about half the CPU per
  // call. Valid while the proxy lives; calls after it end CANCELLED or
  // UNAVAILABLE. Thread-safe.
  std::shared_ptr<grpc::Channel> InProcessChannel() const;
  const std::string& directory() const { return dir_; }

  // After the agent re-joined as a new member: its new channel and node
  // id. Requests in flight finish on the old channel. Thread-safe.
  void SetUpstream(std::shared_ptr<grpc::Channel> server, std::string node_id);
  // The server is replicated (the agent follows its leader): a store read
  // that waits on a leader that dies waits on for the next one, with what
  // was left of its wait (GrpcUpstream::SetFollowLeader). Thread-safe.
  void SetFollowLeader(bool follow);
  // The round the agent's workers now run (StoreCache::SetRound). Thread-safe.
  void SetRound(int64_t round);
  StoreCacheStats stats() const;
  // Calls to the server in flight or kept for the next leader now
  // (GrpcUpstream::in_flight): a forwarded call past
  // cache.max_waiters of them is refused RESOURCE_EXHAUSTED. Thread-safe.
  int64_t upstream_calls() const;
  // Server calls the cache's requests went in (StoreBatcher). Thread-safe.
  StoreBatcherStats batch_stats() const;

  struct Impl;

 private:
  StoreProxy() = default;
  std::unique_ptr<Impl> impl_;
  std::string dir_;
  std::string endpoint_;
};

}  // namespace meshrun::agent
