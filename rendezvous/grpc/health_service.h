// gRPC's standard health service (grpc.health.v1.Health, proto/health.proto)
// as the rendezvous server and meshrun's plaintext health port serve it:
// Check answers anyone (Kubernetes' gRPC probes, grpc_health_probe); Watch,
// a stream that keeps its connection busy, needs the server's token (as
// "authorization: Bearer <token>" metadata) when the server has one, and at
// most max_watchers run at once. Part of the server's gRPC adapter.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "meshrun/proto/health.grpc.pb.h"
#include "rendezvous/policy/memory_budget.h"
#include "rendezvous/policy/timer.h"
#include "rendezvous/state/serving_gate.h"

namespace meshrun::rendezvous {

class HealthService : public grpc::health::v1::Health::CallbackService {
 public:
  // `token`: the server's (empty: Watch is open to anyone too).
  // `max_watchers`: Watch streams at once, RESOURCE_EXHAUSTED past it.
  // `budget`, when given (it must outlive the service), is charged
  // kHealthStreamCost per open Watch stream as anyone's (Claimant::kOther);
  // a refusal is RESOURCE_EXHAUSTED naming the budget. On a server without
  // a token, a Watch stream is unauthenticated: it is ended
  // (DEADLINE_EXCEEDED) `open_stream_limit` after it opened (the server
  // passes connection_idle_timeout), so that no such stream keeps its
  // connection from counting as idle for longer.
  HealthService(std::string token, int64_t max_watchers, MemoryBudget* budget = nullptr,
                absl::Duration open_stream_limit = absl::InfiniteDuration());
  // Ends every Watch stream (UNAVAILABLE); call before the servers it is
  // registered with are destroyed.
  ~HealthService() override;

  // Sets `service`'s status ("" is the whole server); Watch streams of it
  // see the change. Thread-safe.
  void SetServing(const std::string& service, bool serving);
  // The rendezvous server's own services: meshrun.v1.Rendezvous and
  // meshrun.v1.Store (the calls a replica's gate refuses while it stands by
  // or is paused) and meshrun.v1.Admin (Status, which every replica
  // answers). All three are SERVING while `up`, except that Rendezvous and
  // Store are NOT_SERVING while a followed gate is closed (FollowGate);
  // NOT_SERVING when not `up`. Thread-safe.
  void SetServerServing(bool up);
  // Rendezvous and Store follow `gate` from now on: Check answers its
  // current state, and Watch streams see each change. `gate` must outlive
  // the service, which stops following it when destroyed. Call once, before
  // serving.
  void FollowGate(const state::ServingGate* gate);
  // Every known service NOT_SERVING (the server is shutting down), the
  // server's own ones for good (SetServerServing(false)). Thread-safe.
  void SetAllNotServing();
  // Ends every Watch stream, UNAVAILABLE with `why`; new ones are refused
  // from now on. Thread-safe.
  void EndWatches(const std::string& why);
  // Open Watch streams. Thread-safe.
  int64_t watchers() const;

  // gRPC's handlers.
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                                  grpc::health::v1::HealthCheckResponse* resp) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req) override;

  class Watcher;

 private:
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;
  Status StatusOfLocked(const std::string& service) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Remove(Watcher* w);
  // Sets `service` and tells its Watch streams.
  void SetServingLocked(const std::string& service, bool serving) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The server's own services from server_up_ and the gate.
  void UpdateServerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends every unauthenticated stream open for open_stream_limit_.
  void EndExpired();

  const std::string token_;
  const int64_t max_watchers_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool server_up_ ABSL_GUARDED_BY(mu_) = false;
  bool server_known_ ABSL_GUARDED_BY(mu_) = false;  // SetServerServing was called.
  const state::ServingGate* gate_ ABSL_GUARDED_BY(mu_) = nullptr;
  int gate_observer_ ABSL_GUARDED_BY(mu_) = 0;
  MemoryBudget* const budget_;
  const absl::Duration open_stream_limit_;
  // Last: stopped first, so that no EndExpired runs once members go.
  DeadlineTimer timer_;
};

}  // namespace meshrun::rendezvous
