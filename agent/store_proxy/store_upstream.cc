#include "agent/store_proxy/store_upstream.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "proto/types.h"

namespace meshrun::agent {

namespace pb = ::meshrun::v1;

namespace {

// Extra time a batch may take beyond its longest wait, for the round trip.
constexpr absl::Duration kRpcSlack = absl::Seconds(30);

// A kept item as it is sent again: its wait less the time it was kept.
BatchItem Unkept(BatchItem item, absl::Time since, absl::Time now) {
  if (item.request.wait != absl::InfiniteDuration()) {
    item.request.wait = std::max(absl::ZeroDuration(), item.request.wait - (now - since));
  }
  return item;
}

int64_t ToMs(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return INT64_MAX / 4;
  return std::max<int64_t>(0, absl::ToInt64Milliseconds(d));
}

}  // namespace

// One KvBatch call: reads the answers as they come and hands each to its
// item; deletes itself when the call is done.
class KvBatchCall : public grpc::ClientReadReactor<pb::KvBatchResponse> {
 public:
  KvBatchCall(GrpcUpstream* upstream, std::vector<BatchItem> items, absl::AnyInvocable<void()> accepted)
      : upstream_(upstream), started_(absl::Now()), accepted_(std::move(accepted)) {
    absl::Duration longest = absl::ZeroDuration();
    for (BatchItem& item : items) {
      pb::KvBatchItem* p = req_.add_items();
      p->set_round(item.request.round);
      for (auto& k : item.request.keys) p->add_keys(std::move(k));
      for (auto& k : item.request.set_keys) p->add_set_keys(std::move(k));
      for (auto& v : item.request.set_values) p->add_set_values(std::move(v));
      p->set_wait_ms(ToMs(item.request.wait));
      longest = std::max(longest, item.request.wait);
      ids_.push_back(item.id);
      done_.push_back(std::move(item.done));
    }
    waiting_ = static_cast<int>(done_.size());
    upstream_->FillRun(req_.mutable_run());
    ctx_ = upstream_->NewContext(longest == absl::InfiniteDuration()
                                     ? std::chrono::system_clock::time_point::max()
                                     : absl::ToChronoTime(absl::Now() + longest + kRpcSlack),
                                 &stub_);
  }

  const std::vector<StoreUpstream::Id>& ids() const { return ids_; }
  // The stub the call went out on.
  const GrpcUpstream::Stub* stub() const { return stub_.get(); }

  void Begin() {
    stub_->async()->KvBatch(ctx_.get(), &req_, this);
    StartRead(&resp_);
    StartCall();
  }

  // The proxy no longer needs item `id`: answered CANCELLED now; the call
  // is cancelled when no item waits any more. Called under the upstream's
  // lock (so the call is alive); returns what to run after that lock.
  StoreUpstream::Done CancelItem(StoreUpstream::Id id, bool* cancel_call) {
    absl::MutexLock lock(&mu_);
    const size_t i = std::find(ids_.begin(), ids_.end(), id) - ids_.begin();
    if (i >= ids_.size() || !done_[i]) return nullptr;
    *cancel_call = --waiting_ == 0;
    return std::move(done_[i]);
  }
  void TryCancel() { ctx_->TryCancel(); }

  void OnReadInitialMetadataDone(bool) override { Accept(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // The call is ending: OnDone follows.
    // One message may answer several items (those ready together).
    std::vector<std::pair<StoreUpstream::Done, absl::StatusOr<std::vector<std::string>>>> answered;
    {
      absl::MutexLock lock(&mu_);
      for (pb::KvBatchAnswer& a : *resp_.mutable_answers()) {
        const int i = a.index();
        if (i < 0 || static_cast<size_t>(i) >= done_.size() || !done_[static_cast<size_t>(i)]) continue;
        --waiting_;
        if (a.code() == 0) {
          answered.emplace_back(std::move(done_[static_cast<size_t>(i)]),
                                std::vector<std::string>(std::make_move_iterator(a.mutable_values()->begin()),
                                                         std::make_move_iterator(a.mutable_values()->end())));
        } else {
          answered.emplace_back(std::move(done_[static_cast<size_t>(i)]),
                                absl::Status(static_cast<absl::StatusCode>(a.code()), a.message()));
        }
      }
    }
    for (auto& [done, result] : answered) done(std::move(result));
    resp_.Clear();
    StartRead(&resp_);
  }

  void OnDone(const grpc::Status& s) override {
    Accept();
    std::vector<BatchItem> left;
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = 0; i < done_.size(); ++i) {
        if (!done_[i]) continue;
        // What is left of the item, as it was asked, with the wait it has left.
        BatchItem item;
        item.id = ids_[i];
        const pb::KvBatchItem& p = req_.items(static_cast<int>(i));
        item.request.round = p.round();
        item.request.keys.assign(p.keys().begin(), p.keys().end());
        item.request.set_keys.assign(p.set_keys().begin(), p.set_keys().end());
        item.request.set_values.assign(p.set_values().begin(), p.set_values().end());
        const absl::Duration wait =
            p.wait_ms() >= INT64_MAX / 4 ? absl::InfiniteDuration() : absl::Milliseconds(p.wait_ms());
        item.request.wait = std::max(absl::ZeroDuration(), wait - (absl::Now() - started_));
        item.done = std::move(done_[i]);
        left.push_back(std::move(item));
      }
    }
    const absl::Status why =
        s.ok() ? absl::InternalError("the server ended a store batch without answering every request")
               : absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    // The server went away (its replica died): the items wait for the next
    // leader, or get the error now.
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) left = upstream_->KeepForNextLeader(std::move(left), this);
    for (auto& item : left) item.done(why);
    upstream_->BatchEnded(ids_, this);
    delete this;
  }

 private:
  void Accept() {
    absl::AnyInvocable<void()> a;
    {
      absl::MutexLock lock(&mu_);
      a = std::move(accepted_);
    }
    if (a) a();
  }

  GrpcUpstream* const upstream_;
  const absl::Time started_;
  pb::KvBatchRequest req_;
  pb::KvBatchResponse resp_;
  std::shared_ptr<grpc::ClientContext> ctx_;
  std::shared_ptr<GrpcUpstream::Stub> stub_;
  std::vector<StoreUpstream::Id> ids_;
  absl::Mutex mu_;
  std::vector<StoreUpstream::Done> done_ ABSL_GUARDED_BY(mu_);
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  absl::AnyInvocable<void()> accepted_ ABSL_GUARDED_BY(mu_);
};

GrpcUpstream::GrpcUpstream(std::string run_id, std::string token, absl::Duration kept_retry)
    : run_id_(std::move(run_id)), token_(std::move(token)), kept_calls_(std::make_unique<KeptCalls>(kept_retry)) {}

GrpcUpstream::~GrpcUpstream() = default;

void GrpcUpstream::SetChannel(std::shared_ptr<grpc::Channel> channel, std::string node_id) {
  std::vector<BatchItem> kept;
  {
    absl::MutexLock lock(&mu_);
    stub_ = std::shared_ptr<Stub>(pb::Store::NewStub(channel));
    admin_stub_ = std::shared_ptr<pb::Admin::Stub>(pb::Admin::NewStub(std::move(channel)));
    node_id_ = std::move(node_id);
    const absl::Time now = absl::Now();
    for (auto& [id, k] : kept_) kept.push_back(Unkept(std::move(k.item), k.since, now));
    kept_.clear();
    for (const BatchItem& item : kept) items_.erase(item.id);
  }
  // Sent again to the next leader, as one batch (their waits as they are left).
  if (!kept.empty()) StartBatch(std::move(kept), [] {});
  kept_calls_->ResendAll();  // The forwarded calls (and the kept items' timers, which find them gone).
}

bool GrpcUpstream::KeepCall(const Stub* sent_on, absl::AnyInvocable<void(bool resend)> resend) {
  {
    absl::MutexLock lock(&mu_);
    if (!follow_leader_ || stopping_) return false;
    if (stub_.get() == sent_on) {
      kept_calls_->Add(std::move(resend));  // Under mu_: SetChannel's ResendAll comes after it.
      return true;
    }
  }
  resend(true);  // The next leader is known already.
  return true;
}

void GrpcUpstream::SetFollowLeader(bool follow) {
  absl::MutexLock lock(&mu_);
  follow_leader_ = follow;
}

std::vector<BatchItem> GrpcUpstream::KeepForNextLeader(std::vector<BatchItem> items, KvBatchCall* call) {
  std::vector<BatchItem> rest;
  std::vector<BatchItem> now;  // The next leader is named already: sent there at once.
  {
    absl::MutexLock lock(&mu_);
    if (!follow_leader_ || stopping_) return items;
    const bool moved_on = stub_.get() != call->stub();
    std::vector<StoreUpstream::Id> ids;
    for (BatchItem& item : items) {
      auto it = items_.find(item.id);
      if (it == items_.end() || it->second != call) {
        rest.push_back(std::move(item));  // No longer listed: answered as it was.
        continue;
      }
      if (moved_on) {
        items_.erase(it);
        now.push_back(std::move(item));
        continue;
      }
      it->second = nullptr;  // Kept: no call holds it.
      const StoreUpstream::Id id = item.id;
      ids.push_back(id);
      kept_.emplace(id, KeptItem{std::move(item), absl::Now()});
    }
    // No next leader within the retry time: sent again on this connection
    // (the leader followed may have answered UNAVAILABLE itself).
    if (!ids.empty()) {
      kept_calls_->Add([this, ids = std::move(ids)](bool resend) {
        if (resend) ResendKept(ids);
      });
    }
  }
  if (!now.empty()) StartBatch(std::move(now), [] {});
  return rest;
}

void GrpcUpstream::ResendKept(const std::vector<StoreUpstream::Id>& ids) {
  std::vector<BatchItem> again;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;  // Drain answers them.
    for (StoreUpstream::Id id : ids) {
      auto k = kept_.find(id);
      if (k == kept_.end()) continue;  // Sent on by SetChannel, or cancelled.
      again.push_back(Unkept(std::move(k->second.item), k->second.since, absl::Now()));
      kept_.erase(k);
      items_.erase(id);
    }
  }
  if (!again.empty()) StartBatch(std::move(again), [] {});
}

std::shared_ptr<grpc::ClientContext> GrpcUpstream::NewContext(std::chrono::system_clock::time_point deadline,
                                                              std::shared_ptr<Stub>* stub) {
  auto ctx = std::make_shared<grpc::ClientContext>();
  absl::MutexLock lock(&mu_);
  ctx->AddMetadata(rendezvous::kNodeMetadataKey, node_id_);
  if (deadline != std::chrono::system_clock::time_point::max()) ctx->set_deadline(deadline);
  *stub = stub_;
  ++in_flight_;
  return ctx;
}

std::shared_ptr<grpc::ClientContext> GrpcUpstream::NewContext(std::chrono::system_clock::time_point deadline,
                                                              std::shared_ptr<v1::Admin::Stub>* admin) {
  std::shared_ptr<Stub> unused;
  std::shared_ptr<grpc::ClientContext> ctx = NewContext(deadline, &unused);
  absl::MutexLock lock(&mu_);
  *admin = admin_stub_;
  return ctx;
}

void GrpcUpstream::CallEnded() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

int64_t GrpcUpstream::in_flight() {
  const int64_t kept = static_cast<int64_t>(kept_calls_->size());
  absl::MutexLock lock(&mu_);
  return in_flight_ + kept;
}

void GrpcUpstream::FillRun(pb::RunRef* run) const {
  run->set_run_id(run_id_);
  run->set_token(token_);
}

void GrpcUpstream::StartBatch(std::vector<BatchItem> items, absl::AnyInvocable<void()> accepted) {
  auto* call = new KvBatchCall(this, std::move(items), std::move(accepted));
  {
    absl::MutexLock lock(&mu_);
    for (StoreUpstream::Id id : call->ids()) items_[id] = call;
    calls_.insert(call);
  }
  call->Begin();
}

void GrpcUpstream::Cancel(StoreUpstream::Id id) {
  StoreUpstream::Done done;
  bool cancel_call = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = items_.find(id);
    if (it == items_.end()) return;
    if (it->second == nullptr) {
      // Kept for the next leader: answered here (below).
      auto k = kept_.find(id);
      if (k != kept_.end()) done = std::move(k->second.item.done);
      kept_.erase(id);
      items_.erase(it);
    } else {
      done = it->second->CancelItem(id, &cancel_call);
      if (cancel_call) it->second->TryCancel();
    }
  }
  if (done) done(absl::CancelledError("store request cancelled"));
}

void GrpcUpstream::BatchEnded(const std::vector<StoreUpstream::Id>& ids, KvBatchCall* call) {
  absl::MutexLock lock(&mu_);
  for (StoreUpstream::Id id : ids) {
    auto it = items_.find(id);
    if (it != items_.end() && it->second == call) items_.erase(it);
  }
  calls_.erase(call);
  --in_flight_;
}

bool GrpcUpstream::Drain(absl::Duration timeout) {
  std::vector<BatchItem> kept;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (KvBatchCall* call : calls_) call->TryCancel();
    for (auto& [id, k] : kept_) {
      items_.erase(id);
      kept.push_back(std::move(k.item));
    }
    kept_.clear();
  }
  for (BatchItem& item : kept) item.done(absl::CancelledError("the store proxy stopped"));
  kept_calls_->Stop();  // The forwarded calls kept are answered (resend(false)).
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

}  // namespace meshrun::agent
