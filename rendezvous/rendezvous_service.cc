#include "rendezvous/rendezvous_service.h"

#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "rendezvous/requests.h"
#include "rendezvous/wire.h"

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
  WatchReactor(std::shared_ptr<Run> run, std::string node_id, RendezvousService* service)
      : run_(std::move(run)), node_id_(std::move(node_id)), service_(service) {
    service_->WatchStarted();
  }

  void Begin(std::shared_ptr<WatchReactor> self, int64_t known_round) {
    self_ = std::move(self);
    run_->Watch(node_id_, self_, known_round);
  }

  // gRPC's rules, kept under mu_: one write in flight at a time; Finish
  // once, and only when no write is in flight; nothing after Finish.
  void Push(const RunEvent& event) override {
    absl::MutexLock lock(&mu_);
    if (finish_requested_ || done_) return;
    queue_.push_back(ToProto(event));
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
    queue_.pop_front();
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
  absl::Mutex mu_;
  std::deque<pb::RunEvent> queue_ ABSL_GUARDED_BY(mu_);
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

RendezvousService::RendezvousService(RunRegistry* registry, std::string token)
    : registry_(registry), token_(std::move(token)) {}

void RendezvousService::WatchStarted() {
  absl::MutexLock lock(&watch_mu_);
  ++open_watches_;
}

void RendezvousService::WatchEnded() {
  absl::MutexLock lock(&watch_mu_);
  --open_watches_;
}

bool RendezvousService::WaitForNoWatchers(absl::Duration timeout) {
  absl::MutexLock lock(&watch_mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_) { return open_watches_ == 0; };
  return watch_mu_.AwaitWithTimeout(absl::Condition(&none), timeout);
}

grpc::Status RendezvousService::Admit(Method m, const pb::RunRef& run, bool need_run_id) {
  counts_[m].fetch_add(1, std::memory_order_relaxed);
  return ToGrpc(requests::Admit(token_, run, need_run_id));
}

grpc::ServerUnaryReactor* RendezvousService::Join(grpc::CallbackServerContext* ctx,
                                                  const pb::JoinRequest* req, pb::JoinResponse* resp) {
  if (auto s = Admit(kJoin, req->run()); !s.ok()) return Answer(ctx, s);
  absl::StatusOr<requests::JoinArgs> args = requests::JoinFromProto(*req, wire::PeerIp(ctx->peer()));
  if (!args.ok()) return Answer(ctx, ToGrpc(args.status()));
  std::shared_ptr<Run> run = registry_->ForJoin(req->run().run_id(), req->last_round());
  auto* reactor = new ParkedReactor();
  reactor->SetOnCancel([run, id = args->node.node_id] { run->CancelJoin(id); });
  run->Join(args->node, args->config, req->last_round(), [reactor, resp](absl::StatusOr<Assignment> a) {
    if (a.ok()) ToProto(*a, resp->mutable_assignment());
    reactor->Complete(ToGrpc(a.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                       const pb::HeartbeatRequest* req,
                                                       pb::HeartbeatResponse* resp) {
  if (auto s = Admit(kHeartbeat, req->run()); !s.ok()) return Answer(ctx, s);
  std::shared_ptr<Run> run = registry_->Find(req->run().run_id());
  if (!run) return Answer(ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "no such run"));
  absl::StatusOr<int64_t> round = run->Heartbeat(req->node_id());
  if (!round.ok()) return Answer(ctx, ToGrpc(round.status()));
  resp->set_current_round(*round);
  return Answer(ctx, grpc::Status::OK);
}

grpc::ServerWriteReactor<pb::RunEvent>* RendezvousService::Watch(grpc::CallbackServerContext*,
                                                                 const pb::WatchRequest* req) {
  grpc::Status s = Admit(kWatch, req->run());
  if (s.ok() && req->node_id().empty()) {
    s = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "watch needs a node id");
  }
  if (!s.ok()) {
    class Refused : public grpc::ServerWriteReactor<pb::RunEvent> {
     public:
      explicit Refused(const grpc::Status& s) { Finish(s); }
      void OnDone() override { delete this; }
    };
    return new Refused(s);
  }
  std::shared_ptr<Run> run = registry_->ForJoin(req->run().run_id(), req->known_round());
  auto reactor = std::make_shared<WatchReactor>(run, req->node_id(), this);
  reactor->Begin(reactor, req->known_round());
  return reactor.get();
}

grpc::ServerUnaryReactor* RendezvousService::ReportFailure(grpc::CallbackServerContext* ctx,
                                                           const pb::ReportFailureRequest* req,
                                                           pb::ReportFailureResponse* resp) {
  if (auto s = Admit(kReportFailure, req->run()); !s.ok()) return Answer(ctx, s);
  std::shared_ptr<Run> run = registry_->Find(req->run().run_id());
  if (!run) return Answer(ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "no such run"));
  absl::StatusOr<FailureVerdict> v = run->ReportFailure(FromProto(req->failure()));
  if (!v.ok()) return Answer(ctx, ToGrpc(v.status()));
  resp->set_decision(v->decision == Decision::kRestart ? pb::ReportFailureResponse::RESTART
                                                       : pb::ReportFailureResponse::STOP);
  resp->set_next_round(v->next_round);
  ToProto(v->root_cause, resp->mutable_root_cause());
  resp->set_is_root_cause(v->is_root_cause);
  return Answer(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RendezvousService::ReportFinished(grpc::CallbackServerContext* ctx,
                                                            const pb::ReportFinishedRequest* req,
                                                            pb::ReportFinishedResponse* resp) {
  if (auto s = Admit(kReportFinished, req->run()); !s.ok()) return Answer(ctx, s);
  std::shared_ptr<Run> run = registry_->Find(req->run().run_id());
  if (!run) return Answer(ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "no such run"));
  auto* reactor = new ParkedReactor();
  uint64_t id = run->ReportFinished(
      req->node_id(), req->round(), absl::Milliseconds(req->timeout_ms()),
      [reactor, resp](absl::StatusOr<BarrierResult> r) {
        if (r.ok()) {
          resp->set_all_finished(r->all_finished);
          resp->set_finished_nodes(r->finished_nodes);
          resp->set_node_count(r->node_count);
        }
        reactor->Complete(ToGrpc(r.status()));
      });
  if (id != 0) reactor->SetOnCancel([run, id] { run->CancelFinished(id); });
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousService::KvSet(grpc::CallbackServerContext* ctx,
                                                   const pb::KvSetRequest* req, pb::KvSetResponse*) {
  if (auto s = Admit(kKvSet, req->run()); !s.ok()) return Answer(ctx, s);
  registry_->FindOrCreate(req->run().run_id())->kv().Set(req->round(), req->key(), req->value());
  return Answer(ctx, grpc::Status::OK);
}

namespace {

// Parks a waiting store read on the run's store; answers through `fill`.
template <typename Fill>
grpc::ServerUnaryReactor* AwaitKeys(std::shared_ptr<Run> run, int64_t round,
                                    std::vector<std::string> keys, int64_t wait_ms, Fill fill) {
  auto* reactor = new ParkedReactor();
  std::shared_ptr<KvStore> kv(run, &run->kv());
  KvStore::WaiterId id = kv->Await(
      round, std::move(keys), absl::Milliseconds(wait_ms),
      [reactor, fill = std::move(fill)](absl::StatusOr<std::vector<std::string>> values) mutable {
        if (values.ok()) fill(*values);
        reactor->Complete(ToGrpc(values.status()));
      });
  if (id != 0) reactor->SetOnCancel([kv, id] { kv->Cancel(id); });
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* RendezvousService::KvGet(grpc::CallbackServerContext* ctx,
                                                   const pb::KvGetRequest* req, pb::KvGetResponse* resp) {
  if (auto s = Admit(kKvGet, req->run()); !s.ok()) return Answer(ctx, s);
  return AwaitKeys(registry_->FindOrCreate(req->run().run_id()), req->round(), {req->key()},
                   req->wait_ms(), [resp](std::vector<std::string>& v) { resp->set_value(std::move(v[0])); });
}

grpc::ServerUnaryReactor* RendezvousService::KvAdd(grpc::CallbackServerContext* ctx,
                                                   const pb::KvAddRequest* req, pb::KvAddResponse* resp) {
  if (auto s = Admit(kKvAdd, req->run()); !s.ok()) return Answer(ctx, s);
  absl::StatusOr<int64_t> v =
      registry_->FindOrCreate(req->run().run_id())->kv().Add(req->round(), req->key(), req->delta());
  if (v.ok()) resp->set_value(*v);
  return Answer(ctx, ToGrpc(v.status()));
}

grpc::ServerUnaryReactor* RendezvousService::KvCompareSet(grpc::CallbackServerContext* ctx,
                                                          const pb::KvCompareSetRequest* req,
                                                          pb::KvCompareSetResponse* resp) {
  if (auto s = Admit(kKvCompareSet, req->run()); !s.ok()) return Answer(ctx, s);
  auto [value, swapped] = registry_->FindOrCreate(req->run().run_id())
                              ->kv()
                              .CompareSet(req->round(), req->key(), req->expected(), req->desired());
  resp->set_value(std::move(value));
  resp->set_swapped(swapped);
  return Answer(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RendezvousService::KvCheck(grpc::CallbackServerContext* ctx,
                                                     const pb::KvCheckRequest* req, pb::KvCheckResponse* resp) {
  if (auto s = Admit(kKvCheck, req->run()); !s.ok()) return Answer(ctx, s);
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  resp->set_all_present(registry_->FindOrCreate(req->run().run_id())->kv().Check(req->round(), keys));
  return Answer(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RendezvousService::KvDelete(grpc::CallbackServerContext* ctx,
                                                      const pb::KvDeleteRequest* req,
                                                      pb::KvDeleteResponse* resp) {
  if (auto s = Admit(kKvDelete, req->run()); !s.ok()) return Answer(ctx, s);
  resp->set_deleted(registry_->FindOrCreate(req->run().run_id())->kv().Delete(req->round(), req->key()));
  return Answer(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RendezvousService::KvMultiGet(grpc::CallbackServerContext* ctx,
                                                        const pb::KvMultiGetRequest* req,
                                                        pb::KvMultiGetResponse* resp) {
  if (auto s = Admit(kKvMultiGet, req->run()); !s.ok()) return Answer(ctx, s);
  if (!req->set_keys().empty()) {
    absl::Status st = registry_->FindOrCreate(req->run().run_id())
                          ->kv()
                          .MultiSet(req->round(),
                                    std::vector<std::string>(req->set_keys().begin(), req->set_keys().end()),
                                    std::vector<std::string>(req->set_values().begin(), req->set_values().end()));
    if (!st.ok()) return Answer(ctx, ToGrpc(st));
  }
  return AwaitKeys(registry_->FindOrCreate(req->run().run_id()), req->round(),
                   std::vector<std::string>(req->keys().begin(), req->keys().end()), req->wait_ms(),
                   [resp](std::vector<std::string>& v) {
                     for (auto& s : v) resp->add_values(std::move(s));
                   });
}

grpc::ServerUnaryReactor* RendezvousService::KvMultiSet(grpc::CallbackServerContext* ctx,
                                                        const pb::KvMultiSetRequest* req,
                                                        pb::KvMultiSetResponse*) {
  if (auto s = Admit(kKvMultiSet, req->run()); !s.ok()) return Answer(ctx, s);
  absl::Status st = registry_->FindOrCreate(req->run().run_id())
                        ->kv()
                        .MultiSet(req->round(), std::vector<std::string>(req->keys().begin(), req->keys().end()),
                                  std::vector<std::string>(req->values().begin(), req->values().end()));
  return Answer(ctx, ToGrpc(st));
}

grpc::ServerUnaryReactor* RendezvousService::KvWait(grpc::CallbackServerContext* ctx,
                                                    const pb::KvWaitRequest* req, pb::KvWaitResponse*) {
  if (auto s = Admit(kKvWait, req->run()); !s.ok()) return Answer(ctx, s);
  return AwaitKeys(registry_->FindOrCreate(req->run().run_id()), req->round(),
                   std::vector<std::string>(req->keys().begin(), req->keys().end()), req->wait_ms(),
                   [](std::vector<std::string>&) {});
}

grpc::ServerUnaryReactor* RendezvousService::Status(grpc::CallbackServerContext* ctx,
                                                    const pb::StatusRequest* req, pb::StatusResponse* resp) {
  if (auto s = Admit(kStatus, req->run(), /*need_run_id=*/false); !s.ok()) return Answer(ctx, s);
  for (const RunStatus& r : registry_->Status()) {
    if (!req->run().run_id().empty() && r.run_id != req->run().run_id()) continue;
    pb::RunStatus* out = resp->add_runs();
    out->set_run_id(r.run_id);
    out->set_round(r.round);
    out->set_state(r.state);
    out->set_nodes(r.nodes);
    out->set_world_size(r.world_size);
    out->set_restart_count(r.restart_count);
    out->set_kv_keys(r.kv_keys);
  }
  for (int m = 0; m < kNumMethods; ++m) {
    (*resp->mutable_request_counts())[kMethodNames[m]] = counts_[m].load(std::memory_order_relaxed);
  }
  resp->set_port(port_);
  resp->set_version(MESHRUN_VERSION);
  return Answer(ctx, grpc::Status::OK);
}

}  // namespace meshrun::rendezvous
