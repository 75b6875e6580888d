// The thin gRPC adapter: translates rendezvous.proto messages to the domain
// classes of run.h / kv_store.h and back. Holds no state of its own beyond
// the per-method request counters.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <string>

#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "absl/synchronization/mutex.h"
#include "common/open_files.h"
#include "rendezvous/server/memory_release.h"
#include "rendezvous/server/metrics.h"
#include "rendezvous/run/run_registry.h"
#include "rendezvous/run/run.h"
#include "rendezvous/state/serving_gate.h"
#include "rendezvous/server/traffic_counters.h"

namespace meshrun::rendezvous {

class RendezvousService final : public ::meshrun::v1::Rendezvous::CallbackService {
 public:
  enum Method {
    kJoin, kHeartbeat, kWatch, kReportFailure, kReportFinished, kKvSet, kKvGet, kKvAdd,
    kKvCompareSet, kKvCheck, kKvDelete, kKvMultiGet, kKvMultiSet, kKvWait, kKvBatch, kStatus, kNumMethods
  };

  // `registry` (and `metrics` and `traffic`, when not null) must outlive
  // the service. `token`: required on every request when non-empty.
  // `metrics` counts the root causes of failures by cause. `limits`:
  // lengths and sizes checked at the door. `traffic`: store requests are
  // counted there per node (the "meshrun-node" metadata), and its counts
  // are part of the Status answer.
  RendezvousService(RunRegistry* registry, std::string token, ServerMetrics* metrics = nullptr,
                    const ServerLimits& limits = ServerLimits(), TrafficCounters* traffic = nullptr);

  // Watch streams open now (one per connected agent). Thread-safe.
  int open_watchers();

  void set_port(int port) { port_ = port; }
  // The open files limit to compare each join's --nnodes MAX with: a join
  // that needs more descriptors (one per agent connection, plus margin)
  // is warned about, once per larger MAX. Unset: no warning. Call before
  // serving.
  void set_open_files_limit(const OpenFilesLimit& limit) { open_files_ = limit; }
  // Asked to return free heap memory after a burst: when a join is answered
  // (a round closed) and when the last event stream closes. Optional; must
  // outlive the service. Set before serving.
  void set_memory_releaser(MemoryReleaser* releaser) { releaser_ = releaser; }
  // The server's memory budget (memory_budget.h), which event streams and
  // store batches are charged to; null: none. Set before serving.
  void set_memory_budget(MemoryBudget* budget) { budget_ = budget; }
  MemoryBudget* memory_budget() const { return budget_; }
  // A replicated server's gate (rendezvous/state/serving_gate.h): while it
  // is closed every call but Status is answered UNAVAILABLE with who leads
  // (common/standby.h). nullptr (the default): always serving. Must outlive
  // the service. Set before serving.
  void set_gate(const state::ServingGate* gate) { gate_ = gate; }

  // Waits until no Watch stream is open (every agent has gone) or `timeout`
  // passes; true when none is open. Thread-safe.
  bool WaitForNoWatchers(absl::Duration timeout);
  // Called by watch reactors as they start and end.
  void WatchStarted();
  void WatchEnded();

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const v1::JoinRequest* req,
                                 v1::JoinResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const v1::HeartbeatRequest* req,
                                      v1::HeartbeatResponse* resp) override;
  grpc::ServerWriteReactor<v1::RunEvent>* Watch(grpc::CallbackServerContext* ctx,
                                                const v1::WatchRequest* req) override;
  grpc::ServerUnaryReactor* ReportFailure(grpc::CallbackServerContext* ctx,
                                          const v1::ReportFailureRequest* req,
                                          v1::ReportFailureResponse* resp) override;
  grpc::ServerUnaryReactor* ReportFinished(grpc::CallbackServerContext* ctx,
                                           const v1::ReportFinishedRequest* req,
                                           v1::ReportFinishedResponse* resp) override;
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* ctx, const v1::KvSetRequest* req,
                                  v1::KvSetResponse* resp) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* ctx, const v1::KvGetRequest* req,
                                  v1::KvGetResponse* resp) override;
  grpc::ServerUnaryReactor* KvAdd(grpc::CallbackServerContext* ctx, const v1::KvAddRequest* req,
                                  v1::KvAddResponse* resp) override;
  grpc::ServerUnaryReactor* KvCompareSet(grpc::CallbackServerContext* ctx,
                                         const v1::KvCompareSetRequest* req,
                                         v1::KvCompareSetResponse* resp) override;
  grpc::ServerUnaryReactor* KvCheck(grpc::CallbackServerContext* ctx, const v1::KvCheckRequest* req,
                                    v1::KvCheckResponse* resp) override;
  grpc::ServerUnaryReactor* KvDelete(grpc::CallbackServerContext* ctx, const v1::KvDeleteRequest* req,
                                     v1::KvDeleteResponse* resp) override;
  grpc::ServerUnaryReactor* KvMultiGet(grpc::CallbackServerContext* ctx,
                                       const v1::KvMultiGetRequest* req,
                                       v1::KvMultiGetResponse* resp) override;
  grpc::ServerUnaryReactor* KvMultiSet(grpc::CallbackServerContext* ctx,
                                       const v1::KvMultiSetRequest* req,
                                       v1::KvMultiSetResponse* resp) override;
  grpc::ServerUnaryReactor* KvWait(grpc::CallbackServerContext* ctx, const v1::KvWaitRequest* req,
                                   v1::KvWaitResponse* resp) override;
  grpc::ServerWriteReactor<v1::KvBatchResponse>* KvBatch(grpc::CallbackServerContext* ctx,
                                                         const v1::KvBatchRequest* req) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const v1::StatusRequest* req,
                                   v1::StatusResponse* resp) override;

 private:
  // OK, or INVALID_ARGUMENT (a request whose bytes did not parse; an empty
  // or too long run id) / UNAUTHENTICATED (the token).
  grpc::Status Admit(Method m, const google::protobuf::Message& req, const v1::RunRef& run, bool need_run_id = true);
  // Counts a call as served, or as refused (UNAUTHENTICATED,
  // PERMISSION_DENIED, INVALID_ARGUMENT, RESOURCE_EXHAUSTED).
  void Count(Method m, const grpc::Status& s);
  // Counts and answers a unary call at once.
  grpc::ServerUnaryReactor* Reply(Method m, grpc::CallbackServerContext* ctx, const grpc::Status& s);
  // The run an admitted store request goes to (created for a store-only
  // run: RESOURCE_EXHAUSTED or INVALID_ARGUMENT as RunRegistry::FindOrCreate),
  // the request counted in `traffic_` for that run and the node its
  // metadata names, reading `keys_read` keys.
  absl::StatusOr<std::shared_ptr<Run>> StoreRun(grpc::CallbackServerContext* ctx, const v1::RunRef& run,
                                                int64_t keys_read);
  // Admit, then StoreRun: the start of every unary store method (`m` names
  // it, as for Admit).
  absl::StatusOr<std::shared_ptr<Run>> AdmitStore(Method m, grpc::CallbackServerContext* ctx,
                                                  const google::protobuf::Message& req, const v1::RunRef& run,
                                                  int64_t keys_read);

  // Warns when `max_nodes` agents need more descriptors than open_files_.
  void CheckOpenFiles(int64_t max_nodes);

  RunRegistry* const registry_;
  const std::string token_;
  const ServerLimits limits_;
  ServerMetrics* const metrics_;
  TrafficCounters* const traffic_;
  int port_ = 0;
  OpenFilesLimit open_files_;
  std::atomic<int64_t> warned_nodes_{0};
  MemoryReleaser* releaser_ = nullptr;
  MemoryBudget* budget_ = nullptr;
  const state::ServingGate* gate_ = nullptr;
  std::array<std::atomic<int64_t>, kNumMethods> counts_{};
  std::array<std::atomic<int64_t>, kNumMethods> refused_{};
  absl::Mutex watch_mu_;
  int open_watches_ ABSL_GUARDED_BY(watch_mu_) = 0;
};

}  // namespace meshrun::rendezvous
