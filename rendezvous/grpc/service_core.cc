#include "rendezvous/grpc/service_core.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/standby.h"
#include "proto/wire.h"
#include "rendezvous/grpc/reactors.h"
#include "rendezvous/grpc/requests.h"

namespace meshrun::rendezvous {
namespace {

namespace pb = ::meshrun::v1;
using wire::ToGrpc;

constexpr const char* kMethodNames[] = {
    "Join", "Heartbeat", "Watch", "ReportFailure", "ReportFinished", "KvSet", "KvGet", "KvAdd",
    "KvCompareSet", "KvCheck", "KvDelete", "KvMultiGet", "KvMultiSet", "KvWait", "KvBatch", "Status",
    "LighthouseQuorum", "LighthouseHeartbeat", "PlaceReplicaGroup", "ReplicaGroupStates", "KvKeys"};
static_assert(sizeof(kMethodNames) / sizeof(kMethodNames[0]) == ServiceCore::kNumMethods);

}  // namespace

const char* ServiceCore::MethodName(Method m) { return kMethodNames[m]; }

ServiceCore::ServiceCore(RunRegistry* registry, std::string token, ServerMetrics* metrics,
                         const ServerLimits& limits, TrafficCounters* traffic)
    : registry_(registry), token_(std::move(token)), limits_(limits), metrics_(metrics), traffic_(traffic) {}

int ServiceCore::open_watchers() {
  absl::MutexLock lock(&watch_mu_);
  return open_watches_;
}

void ServiceCore::WatchStarted() {
  absl::MutexLock lock(&watch_mu_);
  ++open_watches_;
}

void ServiceCore::WatchEnded() {
  absl::MutexLock lock(&watch_mu_);
  // The last agent left: what its connections held can go back.
  if (--open_watches_ == 0 && releaser_ != nullptr) releaser_->Request();
}

bool ServiceCore::WaitForNoWatchers(absl::Duration timeout) {
  absl::MutexLock lock(&watch_mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_) { return open_watches_ == 0; };
  return watch_mu_.AwaitWithTimeout(absl::Condition(&none), timeout);
}

void ServiceCore::Count(Method m, const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      refused_[m].fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      counts_[m].fetch_add(1, std::memory_order_relaxed);
  }
}

grpc::ServerUnaryReactor* ServiceCore::Reply(Method m, grpc::CallbackServerContext* ctx, const grpc::Status& s) {
  Count(m, s);
  return Answer(ctx, s);
}

absl::Status ServiceCore::AdmitStatus(Method m, const google::protobuf::Message& req, const pb::RunRef& run,
                                      bool need_run_id) {
  if (absl::Status s = wire::CheckWellFormed(req); !s.ok()) return s;
  if (absl::Status s = requests::Admit(token_, run, need_run_id, limits_); !s.ok()) return s;
  // A standby replica answers everything but Status with who leads
  // (common/standby.h), once the token was checked.
  if (gate_ != nullptr && m != kStatus && !gate_->serving()) return StandbyStatus(gate_->Refusal(), gate_->leader());
  return absl::OkStatus();
}

grpc::Status ServiceCore::Admit(Method m, const google::protobuf::Message& req, const pb::RunRef& run,
                                bool need_run_id) {
  return ToGrpc(AdmitStatus(m, req, run, need_run_id));
}

absl::StatusOr<std::shared_ptr<Run>> ServiceCore::StoreRun(grpc::CallbackServerContext* ctx, const pb::RunRef& run,
                                                          int64_t keys_read) {
  if (traffic_ == nullptr) return registry_->FindOrCreate(run.run_id(), nullptr, ctx->peer());
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find(kNodeMetadataKey);
  const absl::string_view node =
      it == metadata.end() ? absl::string_view() : absl::string_view(it->second.data(), it->second.size());
  // Counted under the registry's lock: for this run, never for one removed
  // meanwhile (whose counts ForgetRun dropped).
  return registry_->FindOrCreate(
      run.run_id(), [&] { traffic_->OnStoreRequest(run.run_id(), node, keys_read); }, ctx->peer());
}

absl::StatusOr<std::shared_ptr<Run>> ServiceCore::AdmitStore(grpc::CallbackServerContext* ctx,
                                                            const google::protobuf::Message& req,
                                                            const pb::RunRef& run, int64_t keys_read) {
  // kKvSet stands for every store method: the checks are the same.
  if (absl::Status s = AdmitStatus(kKvSet, req, run, /*need_run_id=*/true); !s.ok()) return s;
  return StoreRun(ctx, run, keys_read);
}

void ServiceCore::CheckOpenFiles(int64_t max_nodes) {
  int64_t warned = warned_nodes_.load(std::memory_order_relaxed);
  if (open_files_.soft == 0 || max_nodes <= warned) return;
  const uint64_t needed = DescriptorsNeeded(max_nodes, 0);
  if (needed <= open_files_.soft || !warned_nodes_.compare_exchange_strong(warned, max_nodes)) return;
  Logger("rdzv")->warn("{}", OpenFilesWarning(open_files_, needed,
                                              absl::StrCat("a run with a node count (MAX) of ", max_nodes)));
}

}  // namespace meshrun::rendezvous
