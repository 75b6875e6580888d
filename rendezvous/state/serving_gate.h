// Whether this replica of the rendezvous server serves now, and who leads
// when it does not (docs/design.md section 4d). The service checks it at the
// door of every rendezvous and store call (RendezvousService::Admit); the
// replica (rendezvous/state/replica.h) opens and closes it; the health
// service follows it (observers). Pure: no gRPC.
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rendezvous/run/serving.h"

namespace meshrun::rendezvous::state {

// One replica as the election lists it.
struct ReplicaView {
  std::string id;       // host:pid
  std::string address;  // host:port agents reach it on
  bool leader = false;
};

class ServingGate : public ServingCheck {
 public:
  // A gate starts closed: a replica serves only once it leads and has
  // restored the state.
  ServingGate() = default;

  // Opens (this replica leads and its state is loaded) or closes it; each
  // change is told to the observers.
  void SetServing(bool serving) {
    if (serving_.exchange(serving, std::memory_order_acq_rel) != serving) NotifyObservers();
  }
  // Whether calls are served now: opened, and not past the moment given to
  // SetValidUntil.
  bool serving() const override {
    if (!serving_.load(std::memory_order_acquire)) return false;
    const int64_t until = valid_until_.load(std::memory_order_acquire);
    return until == kNoLimit || std::chrono::steady_clock::now().time_since_epoch().count() < until;
  }
  // The moment (steady clock) until which this replica's etcd lease is sure
  // to exist: serving() is false from then on, whatever SetServing said,
  // until a later moment is set (an earlier one is ignored). A replica sets
  // it at every confirmed renewal, so that no call is served in the moments
  // between its lease running out and its keeper noticing - e.g. a process
  // stopped (SIGSTOP, a long pause) past its lease, resumed while another
  // replica leads. Observers are not told when the moment passes (the
  // keeper pauses the replica then, which they are told). Never set: no
  // limit (a single server).
  void SetValidUntil(std::chrono::steady_clock::time_point t) {
    const int64_t ns = t.time_since_epoch().count();
    int64_t cur = valid_until_.load(std::memory_order_acquire);
    while (cur == kNoLimit || ns > cur) {
      if (valid_until_.compare_exchange_weak(cur, ns, std::memory_order_acq_rel)) return;
    }
  }
  // `fn` is called after each change of serving() (it reads serving()
  // itself: the last call always sees the last change), on the thread that
  // made the change, under the observers' lock: it must be quick and must
  // not add or remove observers. Returns an id for RemoveObserver.
  // Observing changes nothing of the gate, hence const. Thread-safe.
  int AddObserver(std::function<void()> fn) const {
    absl::MutexLock lock(&observers_mu_);
    observers_.emplace_back(++last_observer_, std::move(fn));
    return last_observer_;
  }
  // Once it returns, `id`'s observer is not running and is never called
  // again. Thread-safe.
  void RemoveObserver(int id) const {
    absl::MutexLock lock(&observers_mu_);
    std::erase_if(observers_, [id](const auto& o) { return o.first == id; });
  }
  // The leader's "host:port" as agents reach it ("" when none is known).
  void SetLeader(std::string leader) {
    absl::MutexLock lock(&mu_);
    leader_ = std::move(leader);
  }
  std::string leader() const {
    absl::MutexLock lock(&mu_);
    return leader_;
  }
  // This replica's own "host:port" (for messages).
  void SetSelf(std::string self) {
    absl::MutexLock lock(&mu_);
    self_ = std::move(self);
  }
  std::string self() const {
    absl::MutexLock lock(&mu_);
    return self_;
  }
  // When this replica began to lead (it won the election and loaded the
  // state; a pause does not change it); absl::InfinitePast() while it does
  // not lead. Wall clock, for `meshrun status`'s leader age. Each change
  // from InfinitePast to a time counts one lead (leads()).
  void SetLeadingSince(absl::Time t) {
    absl::MutexLock lock(&mu_);
    if (leading_since_ == absl::InfinitePast() && t != absl::InfinitePast()) ++leads_;
    leading_since_ = t;
  }
  // Times this replica began to lead since it started (a pause while it
  // leads is not counted): the metrics' meshrun_replica_leads_total.
  int64_t leads() const {
    absl::MutexLock lock(&mu_);
    return leads_;
  }
  absl::Time leading_since() const {
    absl::MutexLock lock(&mu_);
    return leading_since_;
  }
  // Where Replicas() reads the replicas from (the election); set before
  // serving.
  void SetReplicasSource(std::function<std::vector<ReplicaView>()> source) {
    absl::MutexLock lock(&mu_);
    replicas_ = std::move(source);
  }
  // Every replica, the leader first (empty without a source or when it
  // fails). May block on the source (one etcd read).
  std::vector<ReplicaView> Replicas() const {
    std::function<std::vector<ReplicaView>()> source;
    {
      absl::MutexLock lock(&mu_);
      source = replicas_;
    }
    return source ? source() : std::vector<ReplicaView>{};
  }
  // Why this replica, while it leads, does not serve ("" once it serves
  // again): its etcd lease is unconfirmed (etcd lost its quorum, or this
  // host lost etcd). Refusal() says so instead of "stands by".
  void SetPaused(std::string why) {
    absl::MutexLock lock(&mu_);
    paused_ = std::move(why);
  }
  // Why a call is refused while closed, in one line.
  std::string Refusal() const {
    absl::MutexLock lock(&mu_);
    if (!paused_.empty()) {
      return absl::StrCat("this rendezvous server replica (", self_,
                          ") leads but does not serve until etcd confirms its lease: ", paused_);
    }
    // Itself as the leader is stale news (it was deposed and has not yet
    // read who leads now): never send a client back to this replica.
    return absl::StrCat("this rendezvous server replica (", self_, ") stands by; ",
                        leader_.empty() || leader_ == self_
                            ? std::string("no replica leads at the moment (election in progress)")
                            : absl::StrCat("the leader is ", leader_));
  }

 private:
  void NotifyObservers() const {
    absl::MutexLock lock(&observers_mu_);
    for (const auto& [id, fn] : observers_) fn();
  }

  static constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
  std::atomic<bool> serving_{false};
  std::atomic<int64_t> valid_until_{kNoLimit};
  mutable absl::Mutex observers_mu_;
  mutable std::vector<std::pair<int, std::function<void()>>> observers_ ABSL_GUARDED_BY(observers_mu_);
  mutable int last_observer_ ABSL_GUARDED_BY(observers_mu_) = 0;
  mutable absl::Mutex mu_;
  std::string leader_ ABSL_GUARDED_BY(mu_);
  absl::Time leading_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t leads_ ABSL_GUARDED_BY(mu_) = 0;
  std::string self_ ABSL_GUARDED_BY(mu_);
  std::string paused_ ABSL_GUARDED_BY(mu_);
  std::function<std::vector<ReplicaView>()> replicas_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshrun::rendezvous::state
