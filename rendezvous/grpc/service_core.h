// The door shared by the server's three gRPC services (rendezvous_service.h:
// membership; store_service.h: the key-value store; admin_service.h: status
// and replicas): each request's checks (well-formed bytes, the token, the
// run id, a standby's refusal), the per-method request counters the Admin
// service reports, the open event streams, and the server-wide pieces the
// handlers reach (the run registry, limits, metrics, traffic counts, memory
// budget and release). Holds no state of the runs: that is the registry's.
// Thread-safe once serving; the setters are called before serving.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/open_files.h"
#include "meshrun/proto/rendezvous.pb.h"
#include "rendezvous/lighthouse/lighthouse_registry.h"
#include "rendezvous/run/run.h"
#include "rendezvous/run/replica_group_placer.h"
#include "rendezvous/run/run_registry.h"
#include "rendezvous/policy/memory_release.h"
#include "rendezvous/server/metrics.h"
#include "rendezvous/server/traffic_counters.h"
#include "rendezvous/state/serving_gate.h"

namespace meshrun::rendezvous {

class ServiceCore {
 public:
  // Every method of the three services, for the request counters (Status
  // reports them by name: MethodName).
  enum Method {
    kJoin, kHeartbeat, kWatch, kReportFailure, kReportFinished, kKvSet, kKvGet, kKvAdd,
    kKvCompareSet, kKvCheck, kKvDelete, kKvMultiGet, kKvMultiSet, kKvWait, kKvBatch, kStatus,
    kLighthouseQuorum, kLighthouseHeartbeat, kPlaceReplicaGroup, kReplicaGroupStates, kKvKeys, kNumMethods
  };
  // "Join", "KvSet", ... (the method's name in its service; the
  // Lighthouse service's: "LighthouseQuorum", "LighthouseHeartbeat").
  static const char* MethodName(Method m);

  // `registry` (and `metrics` and `traffic`, when not null) must outlive
  // the core. `token`: required on every request when non-empty.
  // `metrics` counts the root causes of failures by cause. `limits`:
  // lengths and sizes checked at the door. `traffic`: store requests are
  // counted there per node (the "meshrun-node" metadata), and its counts
  // are part of the Status answer.
  ServiceCore(RunRegistry* registry, std::string token, ServerMetrics* metrics = nullptr,
              const ServerLimits& limits = ServerLimits(), TrafficCounters* traffic = nullptr);

  // The port Status reports. Call before serving.
  void set_port(int port) { port_ = port; }
  int port() const { return port_; }
  // The open files limit to compare each join's node count (MAX) with: a
  // join that needs more descriptors (one per agent connection, plus
  // margin) is warned about, once per larger MAX. Unset: no warning. Call
  // before serving.
  void set_open_files_limit(const OpenFilesLimit& limit) { open_files_ = limit; }
  // Asked to return free heap memory after a burst: when a join is answered
  // (a round closed) and when the last event stream closes. Optional; must
  // outlive the core. Set before serving.
  void set_memory_releaser(MemoryReleaser* releaser) { releaser_ = releaser; }
  MemoryReleaser* memory_releaser() const { return releaser_; }
  // The server's memory budget (memory_budget.h), which event streams and
  // store batches are charged to; null: none. Set before serving.
  void set_memory_budget(MemoryBudget* budget) { budget_ = budget; }
  MemoryBudget* memory_budget() const { return budget_; }
  // A replicated server's gate (rendezvous/state/serving_gate.h): while it
  // is closed every call but Status is answered UNAVAILABLE with who leads
  // (common/standby.h). nullptr (the default): always serving. Must outlive
  // the core. Set before serving.
  void set_gate(const state::ServingGate* gate) { gate_ = gate; }
  const state::ServingGate* gate() const { return gate_; }

  // The runs' lighthouses (rendezvous/lighthouse/lighthouse_registry.h),
  // which Status reports; null: none. Must outlive the core. Set before
  // serving.
  void set_lighthouses(lighthouse::LighthouseRegistry* l) { lighthouses_ = l; }
  lighthouse::LighthouseRegistry* lighthouses() const { return lighthouses_; }

  RunRegistry* registry() const { return registry_; }
  const ServerLimits& limits() const { return limits_; }
  ServerMetrics* metrics() const { return metrics_; }
  TrafficCounters* traffic() const { return traffic_; }

  // Watch streams open now (one per connected agent).
  int open_watchers();
  // Waits until no Watch stream is open (every agent has gone) or `timeout`
  // passes; true when none is open.
  bool WaitForNoWatchers(absl::Duration timeout);
  // Called by watch reactors as they start and end.
  void WatchStarted();
  void WatchEnded();

  // OK, or INVALID_ARGUMENT (a request whose bytes did not parse; an empty
  // or too long run id) / UNAUTHENTICATED (the token) / UNAVAILABLE with
  // who leads (a standby; for every method but kStatus).
  grpc::Status Admit(Method m, const google::protobuf::Message& req, const v1::RunRef& run, bool need_run_id = true);
  // The same as an absl::Status (a standby's refusal keeps who leads as its
  // payload, common/standby.h).
  absl::Status AdmitStatus(Method m, const google::protobuf::Message& req, const v1::RunRef& run,
                           bool need_run_id = true);
  // Counts a call as served, or as refused (UNAUTHENTICATED,
  // PERMISSION_DENIED, INVALID_ARGUMENT, RESOURCE_EXHAUSTED).
  void Count(Method m, const grpc::Status& s);
  // Counts and answers a unary call at once.
  grpc::ServerUnaryReactor* Reply(Method m, grpc::CallbackServerContext* ctx, const grpc::Status& s);
  // Served and refused calls of `m` so far.
  int64_t served(Method m) const { return counts_[m].load(std::memory_order_relaxed); }
  int64_t refused(Method m) const { return refused_[m].load(std::memory_order_relaxed); }
  // The run an admitted store request goes to (created for a store-only
  // run: RESOURCE_EXHAUSTED or INVALID_ARGUMENT as RunRegistry::FindOrCreate),
  // the request counted in `traffic` for that run and the node its
  // metadata names, reading `keys_read` keys.
  absl::StatusOr<std::shared_ptr<Run>> StoreRun(grpc::CallbackServerContext* ctx, const v1::RunRef& run,
                                                int64_t keys_read);
  // Admit, then StoreRun: the start of every unary store method.
  absl::StatusOr<std::shared_ptr<Run>> AdmitStore(grpc::CallbackServerContext* ctx,
                                                  const google::protobuf::Message& req, const v1::RunRef& run,
                                                  int64_t keys_read);
  // Which replica group a node joins (PlaceReplicaGroup).
  ReplicaGroupPlacer* placer() { return &placer_; }
  // Warns when `max_nodes` agents need more descriptors than the open
  // files limit.
  void CheckOpenFiles(int64_t max_nodes);

 private:
  RunRegistry* const registry_;
  const std::string token_;
  lighthouse::LighthouseRegistry* lighthouses_ = nullptr;
  const ServerLimits limits_;
  ServerMetrics* const metrics_;
  TrafficCounters* const traffic_;
  ReplicaGroupPlacer placer_{registry_, limits_};
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
