// The node's lighthouse endpoint for torchft: serves torchft's
// LighthouseService (Quorum, Heartbeat: proto/torchft.proto) to the job's
// workers on loopback, and forwards each call to the run's lighthouse in the
// rendezvous server (rendezvous.proto's Lighthouse service) with the run id,
// the agent's token and node id, which torchft's client cannot send. The
// workers find it in TORCHFT_LIGHTHOUSE ("http://127.0.0.1:PORT", what
// torchft's Manager reads). A replicated server: SetUpstream follows the
// leader; with SetFollowLeader, a Quorum call that met a lost leader
// (UNAVAILABLE) is kept until SetUpstream names the next one and sent
// again there, or, when no next one is named within kept_retry_ms (the
// leader the agent follows answered UNAVAILABLE: it was not serving yet,
// or paused), sent again on the same connection then; so at most once per
// kept_retry_ms plus once per leader change, within the worker's deadline
// (torchft's Manager does not ask again by default). A heartbeat fails
// UNAVAILABLE (torchft's Manager logs it and sends the next).
//
// A worker's deadline passes through (torchft sets one on every call);
// a cancelled call cancels its forwarded one. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "agent/kept_calls.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "meshrun/proto/torchft.grpc.pb.h"

namespace meshrun::agent {

struct LighthouseProxyOptions {
  std::string run_id;
  std::string token;  // The agent's; never given to workers.
  // Where it listens: loopback, so only this node's processes reach it.
  std::string host = "127.0.0.1";
  int port = 0;  // 0: the OS picks.
  // The lighthouse's settings for the run (rdzv_conf lighthouse_*; 0: the
  // server's defaults, torchft's), sent with every call: the run's first
  // call makes its lighthouse with them.
  int64_t min_replicas = 0;
  int64_t join_timeout_ms = 0;
  int64_t quorum_tick_ms = 0;
  int64_t heartbeat_timeout_ms = 0;
  // A call without a deadline (torchft always sets one) gets this one.
  int64_t default_timeout_ms = 60'000;
  // A kept Quorum call with no next leader named this long is sent again
  // on the current connection (above; agent/kept_calls.h); at least 10.
  int64_t kept_retry_ms = 1'000;
  // Workers' calls held at once (Quorum and Heartbeat, waiting, in flight
  // or kept for the next leader; rdzv_conf lighthouse_max_calls): one more
  // is answered RESOURCE_EXHAUSTED at once, naming the limit. A node's
  // torchft Managers hold one Quorum call and one heartbeat each.
  int64_t max_calls = 1024;
};

class LighthouseProxy final : public torchft::LighthouseService::CallbackService {
 public:
  // Listens on options.host (port options.port); forwards over `server`
  // (the agent's channel) in `node_id`'s name. UNAVAILABLE when it cannot
  // listen.
  static absl::StatusOr<std::unique_ptr<LighthouseProxy>> Start(LighthouseProxyOptions options,
                                                                std::shared_ptr<grpc::Channel> server,
                                                                std::string node_id);
  // Stops serving: calls in flight end CANCELLED (their forwarded calls
  // are cancelled), within a second.
  ~LighthouseProxy() override;

  // "http://127.0.0.1:PORT": the workers' TORCHFT_LIGHTHOUSE.
  const std::string& address() const { return address_; }
  // The channel and node id for calls from now on (the leader changed);
  // Quorum calls kept for the next leader are sent again on it.
  void SetUpstream(std::shared_ptr<grpc::Channel> server, std::string node_id);
  // Replicas: keep Quorum calls whose server went away for the next
  // leader (above). Off (default): they fail UNAVAILABLE at once.
  void SetFollowLeader(bool follow);
  // Workers' calls held now (counted against max_calls until both the
  // worker's call and its forwarded one are done).
  int64_t calls_held() const { return calls_held_->load(); }

  grpc::ServerUnaryReactor* Quorum(grpc::CallbackServerContext* ctx, const torchft::LighthouseQuorumRequest* req,
                                   torchft::LighthouseQuorumResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const torchft::LighthouseHeartbeatRequest* req,
                                      torchft::LighthouseHeartbeatResponse* resp) override;

 private:
  explicit LighthouseProxy(LighthouseProxyOptions options) : o_(std::move(options)) {}
  // A context for one forwarded call (node id, deadline) and the stub.
  std::shared_ptr<grpc::ClientContext> NewContext(grpc::CallbackServerContext* worker,
                                                  std::shared_ptr<v1::Lighthouse::Stub>* stub);
  void Fill(v1::RunRef* run, v1::LighthouseSettings* settings) const;
  // Holds `resend` for the next SetUpstream or kept_retry_ms, whichever
  // comes first (resend(true)), or the proxy's end (resend(false)); runs resend(true) at once when the call went out
  // on another stub than the current one (the next leader is known);
  // false when not following a leader.
  bool Keep(const v1::Lighthouse::Stub* sent_on, std::function<void(bool)> resend);
  // Counts a worker's call against max_calls: false (and not counted) when
  // max_calls are held already.
  bool Admit();
  // A worker's call refused by Admit: answered RESOURCE_EXHAUSTED.
  grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* ctx, const char* what) const;

  const LighthouseProxyOptions o_;
  absl::Mutex mu_;
  std::shared_ptr<v1::Lighthouse::Stub> stub_ ABSL_GUARDED_BY(mu_);
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  bool follow_leader_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<KeptCalls> kept_;  // Quorum calls kept for the next leader.
  // Calls held (Admit); shared with each call, which may end after the proxy.
  std::shared_ptr<std::atomic<int64_t>> calls_held_ = std::make_shared<std::atomic<int64_t>>(0);
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace meshrun::agent
