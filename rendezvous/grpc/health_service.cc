#include "rendezvous/grpc/health_service.h"

#include "absl/strings/str_cat.h"
#include "common/security.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"

namespace meshrun::rendezvous {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch stream: the status now, then each change (only the latest is
// kept while a write is in flight: a slow reader costs one message).
class HealthService::Watcher : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* owner, std::string service) : owner_(owner), service_(std::move(service)) {}

  // Writes `status` unless it is what the client saw last. Thread-safe.
  void Update(Status status) {
    absl::MutexLock lock(&mu_);
    if (done_ || finishing_) return;
    next_ = status;
    WriteLocked();
  }
  // Ends the stream with `s`, after the status not yet written (the
  // shutdown's NOT_SERVING) and a write in flight: Finish waits for them.
  // Thread-safe.
  void End(const grpc::Status& s) {
    absl::MutexLock lock(&mu_);
    if (done_ || finishing_) return;
    finishing_ = true;
    final_ = s;
    MaybeFinishLocked();
  }
  const std::string& service() const { return service_; }
  // When an unauthenticated stream is ended (InfiniteFuture: never), and
  // its charge on the memory budget. Set before the stream is shared.
  absl::Time ends_at = absl::InfiniteFuture();
  HeldCharge charge;

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      if (!done_) {
        done_ = true;
        Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      }
      return;
    }
    WriteLocked();
    MaybeFinishLocked();
  }
  void OnCancel() override { End(grpc::Status::CANCELLED); }
  void OnDone() override {
    owner_->Remove(this);
    delete this;
  }

 private:
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!finishing_ || done_ || writing_) return;
    if (next_ != sent_) {
      WriteLocked();
      return;
    }
    done_ = true;
    Finish(final_);
  }
  void WriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || done_ || next_ == sent_) return;
    sent_ = next_;
    response_.set_status(next_);
    writing_ = true;
    StartWrite(&response_);
  }

  HealthService* const owner_;
  const std::string service_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;       // Finish called.
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;  // End called: Finish once written.
  grpc::Status final_ ABSL_GUARDED_BY(mu_);
  int sent_ ABSL_GUARDED_BY(mu_) = -1;
  Status next_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  HealthCheckResponse response_ ABSL_GUARDED_BY(mu_);
};

HealthService::HealthService(std::string token, int64_t max_watchers, MemoryBudget* budget,
                             absl::Duration open_stream_limit)
    : token_(std::move(token)), max_watchers_(max_watchers), budget_(budget), open_stream_limit_(open_stream_limit) {}

void HealthService::EndExpired() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  for (Watcher* w : watchers_) {
    if (w->ends_at <= now) {
      w->End(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("an unauthenticated health Watch stream ends after ",
                                       absl::FormatDuration(open_stream_limit_),
                                       " (connection_idle_timeout); open a new one, or use Check")));
    }
  }
}

HealthService::~HealthService() {
  const state::ServingGate* gate = nullptr;
  int observer = 0;
  {
    absl::MutexLock lock(&mu_);
    gate = gate_;
    observer = gate_observer_;
  }
  if (gate != nullptr) gate->RemoveObserver(observer);  // Not under mu_: the observer takes it.
  EndWatches("the server is shutting down");
  // Each stream's OnDone removes it; wait for them (bounded by gRPC, which
  // runs OnDone once the server has sent the end).
  absl::MutexLock lock(&mu_);
  auto none = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return watchers_.empty(); };
  mu_.AwaitWithTimeout(absl::Condition(&none), absl::Seconds(5));
}

HealthService::Status HealthService::StatusOfLocked(const std::string& service) const {
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

void HealthService::SetServing(const std::string& service, bool serving) {
  absl::MutexLock lock(&mu_);
  SetServingLocked(service, serving);
}

void HealthService::SetServingLocked(const std::string& service, bool serving) {
  serving_[service] = serving;
  const Status status = StatusOfLocked(service);
  for (Watcher* w : watchers_) {
    if (w->service() == service) w->Update(status);
  }
}

void HealthService::UpdateServerLocked() {
  if (!server_known_) return;
  const bool open = server_up_ && (gate_ == nullptr || gate_->serving());
  SetServingLocked(meshrun::v1::Rendezvous::service_full_name(), open);
  SetServingLocked(meshrun::v1::Store::service_full_name(), open);
  SetServingLocked(meshrun::v1::Admin::service_full_name(), server_up_);
}

void HealthService::SetServerServing(bool up) {
  absl::MutexLock lock(&mu_);
  server_known_ = true;
  server_up_ = up;
  UpdateServerLocked();
}

void HealthService::FollowGate(const state::ServingGate* gate) {
  {
    absl::MutexLock lock(&mu_);
    gate_ = gate;
  }
  // Outside mu_: a change being told holds the observers' lock, then mu_.
  const int observer = gate->AddObserver([this] {
    absl::MutexLock lock(&mu_);
    UpdateServerLocked();
  });
  // After the observer is in: no change falls between this read and it.
  absl::MutexLock lock(&mu_);
  gate_observer_ = observer;
  UpdateServerLocked();
}

void HealthService::SetAllNotServing() {
  absl::MutexLock lock(&mu_);
  server_up_ = false;
  for (auto& [name, serving] : serving_) serving = false;
  for (Watcher* w : watchers_) w->Update(StatusOfLocked(w->service()));
}

void HealthService::EndWatches(const std::string& why) {
  absl::MutexLock lock(&mu_);
  closing_ = true;
  // Under mu_: a stream's OnDone (which removes it) waits, so none is freed meanwhile.
  for (Watcher* w : watchers_) w->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, why));
}

int64_t HealthService::watchers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(watchers_.size());
}

void HealthService::Remove(Watcher* w) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(w);
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* ctx, const HealthCheckRequest* req,
                                               HealthCheckResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Status status;
  {
    absl::MutexLock lock(&mu_);
    status = StatusOfLocked(req->service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("unknown service '", req->service(), "'")));
    return reactor;
  }
  resp->set_status(status);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(grpc::CallbackServerContext* ctx,
                                                                    const HealthCheckRequest* req) {
  auto refuse = [](grpc::StatusCode code, std::string why) {
    class Refused : public grpc::ServerWriteReactor<HealthCheckResponse> {
     public:
      explicit Refused(const grpc::Status& s) { Finish(s); }
      void OnDone() override { delete this; }
    };
    return new Refused(grpc::Status(code, std::move(why)));
  };
  if (!token_.empty()) {
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    const std::string presented =
        it == md.end() ? "" : std::string(it->second.data(), it->second.size());
    if (!TokenEquals(presented, absl::StrCat("Bearer ", token_))) {
      return refuse(grpc::StatusCode::UNAUTHENTICATED,
                    "health Watch needs the server's token (metadata \"authorization: Bearer <token>\"); Check is open");
    }
  }
  auto* w = new Watcher(this, req->service());
  if (budget_ != nullptr) {
    absl::Status charged = budget_->Charge(HeldKind::kHealthStream, 1, kHealthStreamCost, Claimant::kOther,
                                           "a health Watch stream");
    if (!charged.ok()) {
      delete w;
      return refuse(grpc::StatusCode::RESOURCE_EXHAUSTED, std::string(charged.message()));
    }
    w->charge = HeldCharge(budget_, HeldKind::kHealthStream, 1, kHealthStreamCost);
  }
  if (token_.empty() && open_stream_limit_ != absl::InfiniteDuration()) {
    w->ends_at = absl::Now() + open_stream_limit_;
    timer_.Schedule(w->ends_at, [this] { EndExpired(); });
  }
  {
    absl::MutexLock lock(&mu_);
    if (closing_ || static_cast<int64_t>(watchers_.size()) >= max_watchers_) {
      delete w;
      return refuse(grpc::StatusCode::RESOURCE_EXHAUSTED,
                    absl::StrCat("too many health Watch streams open (max_health_watchers=", max_watchers_, ")"));
    }
    watchers_.insert(w);
    w->Update(StatusOfLocked(req->service()));  // Under mu_: a SetServing meanwhile comes after it.
  }
  return w;
}

}  // namespace meshrun::rendezvous
