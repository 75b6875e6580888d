#include "rendezvous/rendezvous_service.h"

#include <list>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/security.h"
#include "rendezvous/requests.h"
#include "proto/wire.h"

namespace meshrun::rendezvous {
namespace {

namespace pb = ::meshrun::v1;

constexpr const char* kMethodNames[] = {
    "Join", "Heartbeat", "Watch", "ReportFailure", "ReportFinished", "KvSet", "KvGet", "KvAdd",
    "KvCompareSet", "KvCheck", "KvDelete", "KvMultiGet", "KvMultiSet", "KvWait", "Status"};

using wire::FromProto;
using wire::ToGrpc;
using wire::ToProto;

// A unary reactor that may finish later, from any thread, exactly once; on
// client cancellation it runs `on_cancel` (which must lead to Complete).
class ParkedReactor : public grpc::ServerUnaryReactor {
 public:
  void Complete(const grpc::Status& s) {
    if (!finished_.exchange(true)) Finish(s);
  }
  void SetOnCancel(absl::AnyInvocable<void()> fn) {
    absl::MutexLock lock(&mu_);
    on_cancel_ = std::move(fn);
  }
  void OnCancel() override {
    absl::AnyInvocable<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      fn = std::move(on_cancel_);
    }
    if (fn) fn();
    // The domain answered already, or had nothing parked: end the call.
    Complete(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }
  void OnDone() override { delete this; }

 private:
  std::atomic<bool> finished_{false};
  absl::Mutex mu_;
  absl::AnyInvocable<void()> on_cancel_ ABSL_GUARDED_BY(mu_);
};

// Streams a run's events; owned jointly by gRPC (until OnDone) and the run.
class WatchReactor : public grpc::ServerWriteReactor<pb::RunEvent>, public EventSink {
 public:
  WatchReactor(std::shared_ptr<Run> run, std::string node_id, RendezvousService* service, const ServerLimits& limits)
      : run_(std::move(run)),
        node_id_(std::move(node_id)),
        service_(service),
        max_events_(limits.max_watch_queue_events),
        max_bytes_(limits.max_watch_queue_bytes) {
    service_->WatchStarted();
  }

  // Subscribes to the run; a refusal ends the stream with it.
  grpc::Status Begin(std::shared_ptr<WatchReactor> self, int64_t known_round, const std::string& session) {
    self_ = std::move(self);
    absl::Status s = run_->Watch(node_id_, self_, known_round, session);
    if (!s.ok()) {
      absl::MutexLock lock(&mu_);
      finish_requested_ = true;
      final_status_ = ToGrpc(s);
      MaybeFinishLocked();
    }
    return ToGrpc(s);
  }

  // gRPC's rules, kept under mu_: one write in flight at a time; Finish
  // once, and only when no write is in flight; nothing after Finish.
  void Push(const RunEvent& event) override {
    absl::MutexLock lock(&mu_);
    if (finish_requested_ || done_) return;
    pb::RunEvent msg = ToProto(event);
    const int64_t size = static_cast<int64_t>(msg.ByteSizeLong());
    if (static_cast<int64_t>(queue_.size()) >= max_events_ || queued_bytes_ + size > max_bytes_) {
      // A watcher that does not read: cut it off, free what it held; its
      // agent re-opens the stream and catches up from its known round.
      final_status_ = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   absl::StrCat("slow watcher: ", queue_.size(), " events (", queued_bytes_,
                                                " bytes) unread; max_watch_queue_events=", max_events_,
                                                ", max_watch_queue_bytes=", max_bytes_, "; re-open the stream"));
      finish_requested_ = true;
      while (queue_.size() > (writing_ ? 1u : 0u)) queue_.pop_back();
      queued_bytes_ = 0;
      MaybeFinishLocked();
      return;
    }
    queued_bytes_ += size;
    queue_.push_back(std::move(msg));
    if (!writing_) {
      writing_ = true;
      StartWrite(&queue_.front());
    }
  }

  void CloseStale(const std::string& why) override {
    absl::MutexLock lock(&mu_);
    if (finish_requested_ || done_) return;
    finish_requested_ = true;
    final_status_ = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, absl::StrCat("stale: ", why));
    MaybeFinishLocked();
  }

  void CloseRun(const std::string& why) override {
    absl::MutexLock lock(&mu_);
    if (finish_requested_ || done_) return;
    finish_requested_ = true;
    final_status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, why);
    MaybeFinishLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    if (!queue_.empty()) {
      queued_bytes_ = std::max<int64_t>(0, queued_bytes_ - static_cast<int64_t>(queue_.front().ByteSizeLong()));
      queue_.pop_front();
    }
    writing_ = false;
    if (!ok) finish_requested_ = true;  // The stream broke.
    if (!finish_requested_ && !queue_.empty()) {
      writing_ = true;
      StartWrite(&queue_.front());
      return;
    }
    MaybeFinishLocked();
  }

  void OnCancel() override {
    run_->Unwatch(node_id_, this);
    absl::MutexLock lock(&mu_);
    finish_requested_ = true;
    MaybeFinishLocked();
  }

  void OnDone() override {
    run_->Unwatch(node_id_, this);
    service_->WatchEnded();
    std::shared_ptr<WatchReactor> self;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      self = std::move(self_);
    }
  }

 private:
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_requested_ && !writing_ && !finished_) {
      finished_ = true;
      Finish(final_status_);
    }
  }

  const std::shared_ptr<Run> run_;
  const std::string node_id_;
  RendezvousService* const service_;
  const int64_t max_events_;
  const int64_t max_bytes_;
  absl::Mutex mu_;
  // A list, not a deque: an empty std::deque allocates ~600 bytes, for
  // each of 10,000 agents' streams; events are rare and short-lived.
  std::list<pb::RunEvent> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_){grpc::StatusCode::CANCELLED, "watch cancelled"};
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<WatchReactor> self_;
};

grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, const grpc::Status& s) {
  auto* r = ctx->DefaultReactor();
  r->Finish(s);
  return r;
}

}  // namespace

RendezvousService::RendezvousService(RunRegistry* registry, std::string token, ServerMetrics* metrics,
                                     const ServerLimits& limits, TrafficCounters* traffic)
    : registry_(registry), token_(std::move(token)), limits_(limits), metrics_(metrics), traffic_(traffic) {}

int RendezvousService::open_watchers() {
  absl::MutexLock lock(&watch_mu_);
  return open_watches_;
}

void RendezvousService::WatchStarted() {
  absl::MutexLock lock(&watch_mu_);
  ++open_watches_;
}

void RendezvousService::WatchEnded() {
  absl::MutexLock lock(&watch_mu_);
  // The last agent left: what its connections held can go back.
  if (--open_watches_ == 0 && releaser_ != nullptr) releaser_->Request();
}

bool RendezvousService::WaitForNoWatchers(absl::Duration timeout) {
  absl::MutexLock lock(&watch_mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_) { return open_watches_ == 0; };
  return watch_mu_.AwaitWithTimeout(absl::Condition(&none), timeout);
}

void RendezvousService::Count(Method m, const grpc::Status& s) {
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

grpc::ServerUnaryReactor* RendezvousService::Reply(Method m, grpc::CallbackServerContext* ctx, const grpc::Status& s) {
  Count(m, s);
  return Answer(ctx, s);
}

grpc::Status RendezvousService::Admit(Method m, const pb::RunRef& run, bool need_run_id) {
  (void)m;
  return ToGrpc(requests::Admit(token_, run, need_run_id, limits_));
}

void RendezvousService::CheckOpenFiles(int64_t max_nodes) {
  int64_t warned = warned_nodes_.load(std::memory_order_relaxed);
  if (open_files_.soft == 0 || max_nodes <= warned) return;
  const uint64_t needed = DescriptorsNeeded(max_nodes, 0);
  if (needed <= open_files_.soft || !warned_nodes_.compare_exchange_strong(warned, max_nodes)) return;
  Logger("rdzv")->warn("{}", OpenFilesWarning(open_files_, needed,
                                              absl::StrCat("a run with --nnodes MAX=", max_nodes)));
}

grpc::ServerUnaryReactor* RendezvousService::Join(grpc::CallbackServerContext* ctx,
                                                  const pb::JoinRequest* req, pb::JoinResponse* resp) {
  if (auto s = Admit(kJoin, req->run()); !s.ok()) return Reply(kJoin, ctx, s);
  absl::StatusOr<requests::JoinArgs> args = requests::JoinFromProto(*req, wire::PeerIp(ctx->peer()), limits_);
  if (!args.ok()) return Reply(kJoin, ctx, ToGrpc(args.status()));
  absl::StatusOr<std::shared_ptr<Run>> run = registry_->ForJoin(req->run().run_id(), req->last_round());
  if (!run.ok()) return Reply(kJoin, ctx, ToGrpc(run.status()));
  CheckOpenFiles(args->config.max_nodes);
  auto* reactor = new ParkedReactor();
  reactor->SetOnCancel([run = *run, id = args->node.node_id] { run->CancelJoin(id); });
  (*run)->Join(args->node, args->config, req->last_round(), req->session(),
               [this, reactor, resp](absl::StatusOr<Assignment> a) {
                 if (a.ok()) ToProto(*a, resp->mutable_assignment());
                 // A round closed: its parked joins are being answered.
                 if (a.ok() && releaser_ != nullptr) releaser_->Request();
                 Count(kJoin, ToGrpc(a.status()));
                 reactor->Complete(ToGrpc(a.status()));
               });
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                       const pb::HeartbeatRequest* req,
                                                       pb::HeartbeatResponse* resp) {
  if (auto s = Admit(kHeartbeat, req->run()); !s.ok()) return Reply(kHeartbeat, ctx, s);
  std::shared_ptr<Run> run = registry_->Find(req->run().run_id());
  if (!run) return Reply(kHeartbeat, ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "no such run"));
  absl::StatusOr<int64_t> round = run->Heartbeat(req->node_id(), req->session());
  if (!round.ok()) return Reply(kHeartbeat, ctx, ToGrpc(round.status()));
  resp->set_current_round(*round);
  return Reply(kHeartbeat, ctx, grpc::Status::OK);
}

grpc::ServerWriteReactor<pb::RunEvent>* RendezvousService::Watch(grpc::CallbackServerContext*,
                                                                 const pb::WatchRequest* req) {
  grpc::Status s = Admit(kWatch, req->run());
  if (s.ok()) {
    s = ToGrpc(CheckLength("node id", req->node_id(), limits_.max_node_id_bytes, "max_node_id_bytes"));
  }
  absl::StatusOr<std::shared_ptr<Run>> run = absl::UnknownError("");
  if (s.ok()) {
    run = registry_->ForJoin(req->run().run_id(), req->known_round());
    s = ToGrpc(run.status());
  }
  if (!s.ok()) {
    Count(kWatch, s);
    class Refused : public grpc::ServerWriteReactor<pb::RunEvent> {
     public:
      explicit Refused(const grpc::Status& s) { Finish(s); }
      void OnDone() override { delete this; }
    };
    return new Refused(s);
  }
  auto reactor = std::make_shared<WatchReactor>(*run, req->node_id(), this, limits_);
  Count(kWatch, reactor->Begin(reactor, req->known_round(), req->session()));
  return reactor.get();
}

grpc::ServerUnaryReactor* RendezvousService::ReportFailure(grpc::CallbackServerContext* ctx,
                                                           const pb::ReportFailureRequest* req,
                                                           pb::ReportFailureResponse* resp) {
  if (auto s = Admit(kReportFailure, req->run()); !s.ok()) return Reply(kReportFailure, ctx, s);
  std::shared_ptr<Run> run = registry_->Find(req->run().run_id());
  if (!run) return Reply(kReportFailure, ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "no such run"));
  absl::StatusOr<FailureVerdict> v = run->ReportFailure(FromProto(req->failure()), req->session());
  if (!v.ok()) return Reply(kReportFailure, ctx, ToGrpc(v.status()));
  if (metrics_ != nullptr && v->is_root_cause) {
    metrics_->RecordFailure(v->root_cause.permanent ? "permanent" : v->root_cause.signal > 0 ? "signal" : "exit_code");
  }
  resp->set_decision(v->decision == Decision::kRestart ? pb::ReportFailureResponse::RESTART
                                                       : pb::ReportFailureResponse::STOP);
  resp->set_next_round(v->next_round);
  ToProto(v->root_cause, resp->mutable_root_cause());
  resp->set_is_root_cause(v->is_root_cause);
  return Reply(kReportFailure, ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RendezvousService::ReportFinished(grpc::CallbackServerContext* ctx,
                                                            const pb::ReportFinishedRequest* req,
                                                            pb::ReportFinishedResponse* resp) {
  if (auto s = Admit(kReportFinished, req->run()); !s.ok()) return Reply(kReportFinished, ctx, s);
  std::shared_ptr<Run> run = registry_->Find(req->run().run_id());
  if (!run) return Reply(kReportFinished, ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "no such run"));
  const absl::Duration timeout = absl::Milliseconds(req->timeout_ms());
  if (timeout < absl::ZeroDuration() || timeout > limits_.max_wait) {
    return Reply(kReportFinished, ctx,
                 grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              absl::StrCat("exit barrier timeout_ms=", req->timeout_ms(), ": allowed: 0..",
                                           absl::ToInt64Milliseconds(limits_.max_wait), " (max_wait)")));
  }
  auto* reactor = new ParkedReactor();
  uint64_t id = run->ReportFinished(
      req->node_id(), req->round(), req->session(), timeout,
      [this, reactor, resp](absl::StatusOr<BarrierResult> r) {
        if (r.ok()) {
          resp->set_all_finished(r->all_finished);
          resp->set_finished_nodes(r->finished_nodes);
          resp->set_node_count(r->node_count);
        }
        Count(kReportFinished, ToGrpc(r.status()));
        reactor->Complete(ToGrpc(r.status()));
      });
  if (id != 0) reactor->SetOnCancel([run, id] { run->CancelFinished(id); });
  return reactor;
}

void RendezvousService::CountStore(grpc::CallbackServerContext* ctx, int64_t keys_read) {
  if (traffic_ == nullptr) return;
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find(kNodeMetadataKey);
  traffic_->OnStoreRequest(it == metadata.end() ? absl::string_view()
                                                : absl::string_view(it->second.data(), it->second.size()),
                           keys_read);
}

absl::StatusOr<std::shared_ptr<Run>> RendezvousService::StoreRun(const pb::RunRef& run) {
  return registry_->FindOrCreate(run.run_id());
}

grpc::ServerUnaryReactor* RendezvousService::KvSet(grpc::CallbackServerContext* ctx,
                                                   const pb::KvSetRequest* req, pb::KvSetResponse*) {
  CountStore(ctx, 0);
  if (auto s = Admit(kKvSet, req->run()); !s.ok()) return Reply(kKvSet, ctx, s);
  absl::StatusOr<std::shared_ptr<Run>> run = StoreRun(req->run());
  if (!run.ok()) return Reply(kKvSet, ctx, ToGrpc(run.status()));
  return Reply(kKvSet, ctx, ToGrpc((*run)->kv().Set(req->round(), req->key(), req->value())));
}

namespace {

// Parks a waiting store read on the run's store; answers through `fill`.
template <typename Fill, typename Counted>
grpc::ServerUnaryReactor* AwaitKeys(std::shared_ptr<Run> run, int64_t round, std::vector<std::string> keys,
                                    int64_t wait_ms, Fill fill, Counted counted) {
  auto* reactor = new ParkedReactor();
  std::shared_ptr<KvStore> kv(run, &run->kv());
  KvStore::WaiterId id = kv->Await(
      round, std::move(keys), absl::Milliseconds(wait_ms),
      [reactor, fill = std::move(fill), counted = std::move(counted)](
          absl::StatusOr<std::vector<std::string>> values) mutable {
        if (values.ok()) fill(*values);
        counted(ToGrpc(values.status()));
        reactor->Complete(ToGrpc(values.status()));
      });
  if (id != 0) reactor->SetOnCancel([kv, id] { kv->Cancel(id); });
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* RendezvousService::KvGet(grpc::CallbackServerContext* ctx,
                                                   const pb::KvGetRequest* req, pb::KvGetResponse* resp) {
  CountStore(ctx, 1);
  if (auto s = Admit(kKvGet, req->run()); !s.ok()) return Reply(kKvGet, ctx, s);
  absl::StatusOr<std::shared_ptr<Run>> run = StoreRun(req->run());
  if (!run.ok()) return Reply(kKvGet, ctx, ToGrpc(run.status()));
  return AwaitKeys(
      *run, req->round(), {req->key()}, req->wait_ms(),
      [resp](std::vector<std::string>& v) { resp->set_value(std::move(v[0])); },
      [this](const grpc::Status& s) { Count(kKvGet, s); });
}

grpc::ServerUnaryReactor* RendezvousService::KvAdd(grpc::CallbackServerContext* ctx,
                                                   const pb::KvAddRequest* req, pb::KvAddResponse* resp) {
  CountStore(ctx, 0);
  if (auto s = Admit(kKvAdd, req->run()); !s.ok()) return Reply(kKvAdd, ctx, s);
  absl::StatusOr<std::shared_ptr<Run>> run = StoreRun(req->run());
  if (!run.ok()) return Reply(kKvAdd, ctx, ToGrpc(run.status()));
  absl::StatusOr<int64_t> v = (*run)->kv().Add(req->round(), req->key(), req->delta());
  if (v.ok()) resp->set_value(*v);
  return Reply(kKvAdd, ctx, ToGrpc(v.status()));
}

grpc::ServerUnaryReactor* RendezvousService::KvCompareSet(grpc::CallbackServerContext* ctx,
                                                          const pb::KvCompareSetRequest* req,
                                                          pb::KvCompareSetResponse* resp) {
  CountStore(ctx, 0);
  if (auto s = Admit(kKvCompareSet, req->run()); !s.ok()) return Reply(kKvCompareSet, ctx, s);
  absl::StatusOr<std::shared_ptr<Run>> run = StoreRun(req->run());
  if (!run.ok()) return Reply(kKvCompareSet, ctx, ToGrpc(run.status()));
  absl::StatusOr<std::pair<std::string, bool>> r =
      (*run)->kv().CompareSet(req->round(), req->key(), req->expected(), req->desired());
  if (r.ok()) {
    resp->set_value(std::move(r->first));
    resp->set_swapped(r->second);
  }
  return Reply(kKvCompareSet, ctx, ToGrpc(r.status()));
}

grpc::ServerUnaryReactor* RendezvousService::KvCheck(grpc::CallbackServerContext* ctx,
                                                     const pb::KvCheckRequest* req, pb::KvCheckResponse* resp) {
  CountStore(ctx, req->keys_size());
  if (auto s = Admit(kKvCheck, req->run()); !s.ok()) return Reply(kKvCheck, ctx, s);
  absl::StatusOr<std::shared_ptr<Run>> run = StoreRun(req->run());
  if (!run.ok()) return Reply(kKvCheck, ctx, ToGrpc(run.status()));
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  resp->set_all_present((*run)->kv().Check(req->round(), keys));
  return Reply(kKvCheck, ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RendezvousService::KvDelete(grpc::CallbackServerContext* ctx,
                                                      const pb::KvDeleteRequest* req,
                                                      pb::KvDeleteResponse* resp) {
  CountStore(ctx, 0);
  if (auto s = Admit(kKvDelete, req->run()); !s.ok()) return Reply(kKvDelete, ctx, s);
  absl::StatusOr<std::shared_ptr<Run>> run = StoreRun(req->run());
  if (!run.ok()) return Reply(kKvDelete, ctx, ToGrpc(run.status()));
  absl::StatusOr<bool> deleted = (*run)->kv().Delete(req->round(), req->key());
  if (deleted.ok()) resp->set_deleted(*deleted);
  return Reply(kKvDelete, ctx, ToGrpc(deleted.status()));
}

grpc::ServerUnaryReactor* RendezvousService::KvMultiGet(grpc::CallbackServerContext* ctx,
                                                        const pb::KvMultiGetRequest* req,
                                                        pb::KvMultiGetResponse* resp) {
  CountStore(ctx, req->keys_size());
  if (auto s = Admit(kKvMultiGet, req->run()); !s.ok()) return Reply(kKvMultiGet, ctx, s);
  absl::StatusOr<std::shared_ptr<Run>> run = StoreRun(req->run());
  if (!run.ok()) return Reply(kKvMultiGet, ctx, ToGrpc(run.status()));
  if (!req->set_keys().empty()) {
    absl::Status st = (*run)->kv().MultiSet(
        req->round(), std::vector<std::string>(req->set_keys().begin(), req->set_keys().end()),
        std::vector<std::string>(req->set_values().begin(), req->set_values().end()));
    if (!st.ok()) return Reply(kKvMultiGet, ctx, ToGrpc(st));
  }
  return AwaitKeys(
      *run, req->round(), std::vector<std::string>(req->keys().begin(), req->keys().end()), req->wait_ms(),
      [resp](std::vector<std::string>& v) {
        for (auto& s : v) resp->add_values(std::move(s));
      },
      [this](const grpc::Status& s) { Count(kKvMultiGet, s); });
}

grpc::ServerUnaryReactor* RendezvousService::KvMultiSet(grpc::CallbackServerContext* ctx,
                                                        const pb::KvMultiSetRequest* req,
                                                        pb::KvMultiSetResponse*) {
  CountStore(ctx, 0);
  if (auto s = Admit(kKvMultiSet, req->run()); !s.ok()) return Reply(kKvMultiSet, ctx, s);
  absl::StatusOr<std::shared_ptr<Run>> run = StoreRun(req->run());
  if (!run.ok()) return Reply(kKvMultiSet, ctx, ToGrpc(run.status()));
  absl::Status st = (*run)->kv().MultiSet(req->round(),
                                          std::vector<std::string>(req->keys().begin(), req->keys().end()),
                                          std::vector<std::string>(req->values().begin(), req->values().end()));
  return Reply(kKvMultiSet, ctx, ToGrpc(st));
}

grpc::ServerUnaryReactor* RendezvousService::KvWait(grpc::CallbackServerContext* ctx,
                                                    const pb::KvWaitRequest* req, pb::KvWaitResponse*) {
  CountStore(ctx, req->keys_size());
  if (auto s = Admit(kKvWait, req->run()); !s.ok()) return Reply(kKvWait, ctx, s);
  absl::StatusOr<std::shared_ptr<Run>> run = StoreRun(req->run());
  if (!run.ok()) return Reply(kKvWait, ctx, ToGrpc(run.status()));
  return AwaitKeys(
      *run, req->round(), std::vector<std::string>(req->keys().begin(), req->keys().end()), req->wait_ms(),
      [](std::vector<std::string>&) {}, [this](const grpc::Status& s) { Count(kKvWait, s); });
}

grpc::ServerUnaryReactor* RendezvousService::Status(grpc::CallbackServerContext* ctx,
                                                    const pb::StatusRequest* req, pb::StatusResponse* resp) {
  if (auto s = Admit(kStatus, req->run(), /*need_run_id=*/false); !s.ok()) return Reply(kStatus, ctx, s);
  if (req->run().run_id().empty()) {
    for (const RunStatus& r : registry_->Status()) ToProto(r, resp->add_runs());
  } else if (std::optional<RunStatus> r = registry_->StatusOf(req->run().run_id())) {
    // One run costs that run, however many the server holds.
    ToProto(*r, resp->add_runs());
  }
  for (int m = 0; m < kNumMethods; ++m) {
    (*resp->mutable_request_counts())[kMethodNames[m]] = counts_[m].load(std::memory_order_relaxed);
    (*resp->mutable_refused_counts())[kMethodNames[m]] = refused_[m].load(std::memory_order_relaxed);
  }
  if (traffic_ != nullptr) {
    TrafficSnapshot t = traffic_->Snapshot();
    resp->set_connections_accepted(t.connections_accepted);
    resp->mutable_store_requests_by_node()->insert(t.store_requests_by_node.begin(), t.store_requests_by_node.end());
    resp->mutable_store_keys_read_by_node()->insert(t.store_keys_read_by_node.begin(),
                                                    t.store_keys_read_by_node.end());
  }
  resp->set_port(port_);
  resp->set_version(MESHRUN_VERSION);
  return Answer(ctx, grpc::Status::OK);
}

}  // namespace meshrun::rendezvous
