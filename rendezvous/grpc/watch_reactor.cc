#include "rendezvous/grpc/watch_reactor.h"

#include <list>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/stale.h"
#include "proto/wire.h"
#include "rendezvous/grpc/service_core.h"

namespace meshrun::rendezvous {
namespace {

namespace pb = ::meshrun::v1;
using wire::ToGrpc;
using wire::ToProto;

// Streams a run's events; owned jointly by gRPC (until OnDone) and the run.
class WatchReactor : public grpc::ServerWriteReactor<pb::RunEvent>, public EventSink {
 public:
  WatchReactor(grpc::CallbackServerContext* ctx, std::shared_ptr<Run> run, std::string node_id,
               ServiceCore* service, const ServerLimits& limits)
      : ctx_(ctx),
        run_(std::move(run)),
        node_id_(std::move(node_id)),
        service_(service),
        max_events_(limits.max_watch_queue_events),
        max_bytes_(limits.max_watch_queue_bytes),
        budget_(service->memory_budget()) {
    service_->WatchStarted();
  }

  // Subscribes to the run; a refusal ends the stream with it.
  grpc::Status Begin(std::shared_ptr<WatchReactor> self, int64_t known_round, const std::string& session) {
    self_ = std::move(self);
    absl::Status s = run_->Watch(node_id_, self_, known_round, session, [this](Claimant who) {
      {
        absl::MutexLock lock(&mu_);
        member_ = who == Claimant::kMember;
      }
      if (budget_ == nullptr) return absl::OkStatus();
      absl::Status charged = budget_->Charge(HeldKind::kEventStream, 1, kEventStreamCost, who,
                                             absl::StrCat("an event stream of node '", node_id_.substr(0, 64), "'"));
      if (charged.ok()) stream_charge_ = HeldCharge(budget_, HeldKind::kEventStream, 1, kEventStreamCost);
      return charged;
    }, ctx_->peer());
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
      while (queue_.size() > (writing_ ? 1u : 0u)) {
        if (budget_ != nullptr) budget_->Release(HeldKind::kQueuedEvent, 1, queue_.back().ByteSizeLong());
        queue_.pop_back();
      }
      queued_bytes_ = 0;
      MaybeFinishLocked();
      return;
    }
    if (budget_ != nullptr) {
      // A member's event is served whatever it costs (its queue is bounded
      // above); anyone else's needs room in the budget.
      if (member_) {
        budget_->ForceCharge(HeldKind::kQueuedEvent, 1, size);
      } else if (absl::Status s = budget_->Charge(HeldKind::kQueuedEvent, 1, size, Claimant::kOther,
                                                  "an event queued to a non-member's stream");
                 !s.ok()) {
        final_status_ = ToGrpc(s);
        finish_requested_ = true;
        MaybeFinishLocked();
        return;
      }
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
    final_status_ = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, absl::StrCat("stale: ", why),
                                 std::string(kStaleDetail));
    MaybeFinishLocked();
  }

  void PromoteToMember() override {
    absl::MutexLock lock(&mu_);
    member_ = true;
  }

  void CloseEvicted(const std::string& why) override {
    absl::MutexLock lock(&mu_);
    if (finish_requested_ || done_) return;
    finish_requested_ = true;
    ctx_->AddTrailingMetadata(kEvictedMetadataKey, "not-joined");
    final_status_ = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, why);
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
      const int64_t size = static_cast<int64_t>(queue_.front().ByteSizeLong());
      queued_bytes_ = std::max<int64_t>(0, queued_bytes_ - size);
      if (budget_ != nullptr) budget_->Release(HeldKind::kQueuedEvent, 1, size);
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
      if (budget_ != nullptr) {
        for (const auto& e : queue_) budget_->Release(HeldKind::kQueuedEvent, 1, e.ByteSizeLong());
      }
      std::list<pb::RunEvent>().swap(queue_);
      stream_charge_.Reset();
    }
  }

 private:
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_requested_ && !writing_ && !finished_) {
      finished_ = true;
      Finish(final_status_);
    }
  }

  grpc::CallbackServerContext* const ctx_;
  const std::shared_ptr<Run> run_;
  const std::string node_id_;
  ServiceCore* const service_;
  const int64_t max_events_;
  const int64_t max_bytes_;
  MemoryBudget* const budget_;
  bool member_ ABSL_GUARDED_BY(mu_) = false;  // A member's stream (Run::Watch; PromoteToMember).
  HeldCharge stream_charge_;  // kEventStreamCost while the stream is open.
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

}  // namespace

grpc::ServerWriteReactor<pb::RunEvent>* StartWatch(grpc::CallbackServerContext* ctx, std::shared_ptr<Run> run,
                                                   std::string node_id,
                                                   ServiceCore* service, const ServerLimits& limits,
                                                   int64_t known_round, const std::string& session,
                                                   grpc::Status* status) {
  auto reactor = std::make_shared<WatchReactor>(ctx, std::move(run), std::move(node_id), service, limits);
  *status = reactor->Begin(reactor, known_round, session);
  return reactor.get();
}

}  // namespace meshrun::rendezvous
