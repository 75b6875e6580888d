// RunRegistry: every run of a server by run id, within max_runs; ended runs
// are removed ended_run_ttl after they ended.
#include "rendezvous/run/run_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rendezvous/policy/memory_release.h"
#include "rendezvous/run/run_timeline.h"

namespace meshrun::rendezvous {
namespace {

// Why an ended run's parked calls end, whether swept after ended_run_ttl or
// evicted to make room at max_runs: "run '<id>' ended and was removed".
constexpr absl::string_view kEndedWhy = "ended and was removed";

// Closes a run just taken out of the registry; "run '<id>' <why>" is its
// parked calls' answer. Called without the registry's lock.
void CloseRun(Run& run, absl::string_view why) { run.Close(absl::StrCat("run '", run.run_id(), "' ", why)); }

}  // namespace

RunRegistry::RunRegistry(DeadlineTimer* timer, const ServerLimits& limits, Clock clock, MemoryBudget* budget)
    : timer_(timer),
      limits_(limits),
      clock_(clock ? std::move(clock) : Clock([] { return absl::Now(); })),
      server_bytes_(std::make_shared<std::atomic<int64_t>>(0)),
      budget_(budget) {
  ArmSweep();
}

RunRegistry::~RunRegistry() {
  DeadlineTimer::Id id = 0;
  {
    absl::MutexLock lock(&sweep_mu_);
    stopping_ = true;
    id = sweep_id_;
  }
  // A sweep running now finishes first, and arms no other.
  timer_->CancelAndWait(id);
  CloseAll("the rendezvous server is shutting down");
}

void RunRegistry::ArmSweep() {
  absl::MutexLock lock(&sweep_mu_);
  if (stopping_) return;
  const absl::Duration period =
      std::clamp(limits_.ended_run_ttl / 10, absl::Milliseconds(10), absl::Seconds(1));
  sweep_id_ = timer_->Schedule(absl::Now() + period, [this] {
    SweepEnded();
    if (const absl::Time now = clock_(); now >= next_idle_sweep_) {
      const absl::Duration shortest = std::min(limits_.store_only_run_ttl, limits_.nodeless_run_ttl);
      next_idle_sweep_ = now + std::clamp(shortest / 10, absl::Seconds(1), absl::Minutes(1));
      SweepIdleStoreOnly();
      SweepNodeless();
    }
    ArmSweep();
  });
}

int64_t RunRegistry::NextIncarnationLocked() {
  last_incarnation_ = std::max(last_incarnation_ + 1, absl::ToUnixNanos(absl::Now()));
  return last_incarnation_;
}

void RunRegistry::Forget(Run& run, absl::string_view why) {
  CloseRun(run, why);
  if (journal_ == nullptr) return;
  if (absl::Status s = journal_->Drop(run.run_id(), run.incarnation()); !s.ok()) {
    // Not leading any more: the next leader's Load drops what it finds of no run.
    Logger("rdzv")->warn("run '{}' removed, but its state stays in the journal: {}", run.run_id(),
                         std::string(s.message()));
  }
}

absl::StatusOr<std::shared_ptr<Run>> RunRegistry::NewRunLocked(const std::string& run_id, Claimant who,
                                                               const std::string& creator, int64_t incarnation) {
  if (!creator.empty()) {
    auto c = runs_by_creator_.find(creator);
    if (c != runs_by_creator_.end() && c->second >= limits_.max_runs_per_connection) {
      return absl::ResourceExhaustedError(absl::StrCat("this connection (", creator.substr(0, 64), ") created ",
                                                       c->second, " of the runs held: max_runs_per_connection=",
                                                       limits_.max_runs_per_connection, "; refused new run '",
                                                       run_id.substr(0, 64), "'"));
    }
  }
  HeldCharge charge;
  if (budget_ != nullptr) {
    // The run and its timeline, full.
    const int64_t cost = kRunCost + limits_.max_run_events * kTimelineEventCost;
    if (incarnation != 0) {
      budget_->ForceCharge(HeldKind::kRun, 1, cost);
    } else if (absl::Status s = budget_->Charge(HeldKind::kRun, 1, cost, who,
                                                absl::StrCat("new run '", run_id.substr(0, 64), "'"));
               !s.ok()) {
      return s;
    }
    charge = HeldCharge(budget_, HeldKind::kRun, 1, cost);
  }
  auto run = std::make_shared<Run>(run_id, timer_, limits_, server_bytes_, budget_, std::move(charge));
  if (!creator.empty()) {
    ++runs_by_creator_[creator];
    creator_of_[run_id] = creator;
  }
  // The hook may outlive the registry (a run's last timer can end it during
  // shutdown): it holds the queue weakly, never the registry.
  run->SetOnEnded([ended = std::weak_ptr<EndedRuns>(ended_), clock = clock_, id = run_id,
                   weak = std::weak_ptr<Run>(run)] {
    if (std::shared_ptr<EndedRuns> e = ended.lock()) {
      const absl::Time now = clock();
      absl::MutexLock lock(&e->mu);
      e->queue.emplace_back(now, id, weak);
    }
  });
  run->NoteActivity(clock_());  // A new run is not idle from the start.
  if (incarnation > 0) {
    last_incarnation_ = std::max(last_incarnation_, incarnation);
  } else {
    incarnation = NextIncarnationLocked();
  }
  if (journal_ != nullptr) {
    run->SetJournal(journal_, journal_seq_, incarnation, on_durability_lost_);
    if (save_timer_ != nullptr) run->SetSaveTimer(save_timer_);
  }
  if (gate_ != nullptr) run->SetGate(gate_);
  runs_[run_id] = run;
  return run;
}

void RunRegistry::Clear(const std::string& why) {
  std::vector<std::shared_ptr<Run>> removed;
  {
    absl::MutexLock lock(&mu_);
    while (!runs_.empty()) removed.push_back(EraseLocked(runs_.begin()));
  }
  // Not the runs' end: their clients go on with the next leader.
  for (auto& run : removed) run->Close(why, absl::StatusCode::kUnavailable);
}

void RunRegistry::Restore(const std::vector<state::RunRecord>& records, const std::string& why,
                          const TimelineEvent& takeover) {
  Clear(why);
  int64_t max_seq = 0;
  std::vector<std::shared_ptr<Run>> ended;
  {
    absl::MutexLock lock(&mu_);
    for (const state::RunRecord& r : records) {
      max_seq = std::max(max_seq, r.seq);
      // A job's run as a member's: what a job had acknowledged is restored first.
      absl::StatusOr<std::shared_ptr<Run>> made =
          NewRunLocked(r.run_id, r.store_only ? Claimant::kOther : Claimant::kMember, "", r.incarnation);
      if (!made.ok()) {
        Logger("rdzv")->error("run '{}' not restored: {}", r.run_id, std::string(made.status().message()));
        continue;
      }
      std::shared_ptr<Run> run = std::move(*made);
      run->Restore(r);
      if (!takeover.kind.empty() && !r.store_only) run->Note(takeover.kind, takeover.detail);
      if (r.state == "finished" || r.state == "failed") ended.push_back(run);
    }
    // Later records (of these runs or new ones) are numbered after them.
    int64_t seq = journal_seq_->load();
    while (seq < max_seq && !journal_seq_->compare_exchange_weak(seq, max_seq)) {
    }
  }
  // An ended run is removed ended_run_ttl from now, as if it had just ended.
  absl::MutexLock lock(&ended_->mu);
  for (auto& run : ended) ended_->queue.emplace_back(clock_(), run->run_id(), run);
}

std::shared_ptr<Run> RunRegistry::TakeEndedLocked(absl::Time cutoff) {
  absl::MutexLock lock(&ended_->mu);
  auto& queue = ended_->queue;
  while (!queue.empty() && std::get<0>(queue.front()) <= cutoff) {
    std::string id = std::move(std::get<1>(queue.front()));
    std::shared_ptr<Run> run = std::get<2>(queue.front()).lock();
    queue.pop_front();
    // Gone already, or replaced by a new job under the same id.
    if (!run) continue;
    auto it = runs_.find(id);
    if (it == runs_.end() || it->second != run) continue;
    return EraseLocked(it);
  }
  return nullptr;
}

std::shared_ptr<Run> RunRegistry::TakeEndedForRoomLocked() {
  absl::MutexLock lock(&ended_->mu);
  auto& queue = ended_->queue;
  const absl::Time grace_cutoff = clock_() - limits_.ended_run_room_grace;
  // Bounded: 64 live entries looked at; dead ones (gone, or replaced by a
  // new job under the id) are dropped as they are met.
  for (size_t i = 0, looked = 0; i < queue.size() && looked < 64;) {
    const auto& [ended_at, id, weak] = queue[i];
    std::shared_ptr<Run> run = weak.lock();
    auto it = run ? runs_.find(id) : runs_.end();
    if (!run || it == runs_.end() || it->second != run) {
      queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (ended_at <= grace_cutoff || run->agents_left()) {
      queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(i));
      return EraseLocked(it);
    }
    ++i;
    ++looked;
  }
  return nullptr;
}

std::shared_ptr<Run> RunRegistry::TakeLeastRecentStoreOnlyLocked() {
  RunMap::iterator oldest = runs_.end();
  int64_t oldest_ns = INT64_MAX;
  for (auto it = runs_.begin(); it != runs_.end(); ++it) {
    if (!it->second->store_only() || it->second->made_for_join()) continue;
    if (const int64_t ns = it->second->last_activity_ns(); ns < oldest_ns) {
      oldest_ns = ns;
      oldest = it;
    }
  }
  return oldest == runs_.end() ? nullptr : EraseLocked(oldest);
}

absl::Status RunRegistry::MakeRoomLocked(const std::string& run_id, bool for_join, std::shared_ptr<Run>* evicted) {
  if (absl::Status s = CheckLength("run id", run_id, limits_.max_run_id_bytes, "max_run_id_bytes"); !s.ok()) return s;
  if (static_cast<int64_t>(runs_.size()) < limits_.max_runs) return absl::OkStatus();
  // Full: the run that ended first makes room, once its agents are gone.
  if (std::shared_ptr<Run> run = TakeEndedForRoomLocked()) {
    *evicted = std::move(run);
    return absl::OkStatus();
  }
  // Then the store-only run used least recently: a job comes first.
  if (for_join) {
    if (std::shared_ptr<Run> run = TakeLeastRecentStoreOnlyLocked()) {
      Logger("rdzv")->warn("max_runs={} runs held: store-only run '{}' removed to make room for job '{}'",
                           limits_.max_runs, run->run_id(), run_id.substr(0, 64));
      *evicted = std::move(run);
      return absl::OkStatus();
    }
  }
  return absl::ResourceExhaustedError(absl::StrCat("the server holds ", runs_.size(),
                                                   " live runs: max_runs=", limits_.max_runs,
                                                   "; refused new run '", run_id.substr(0, 64), "'"));
}

absl::StatusOr<std::shared_ptr<Run>> RunRegistry::ForJoin(const std::string& run_id, int64_t last_round,
                                                          const std::string& creator) {
  std::shared_ptr<Run> old;
  std::shared_ptr<Run> evicted;
  std::shared_ptr<Run> fresh;
  {
    absl::ReleasableMutexLock lock(&mu_);
    auto it = runs_.find(run_id);
    if (it != runs_.end() && !(it->second->terminal() && last_round < 0)) {
      // Not idle while a node joins (a store-only run it joins included).
      it->second->NoteActivity(clock_());
      return it->second;
    }
    if (it == runs_.end()) {
      if (absl::Status s = MakeRoomLocked(run_id, /*for_join=*/true, &evicted); !s.ok()) return s;
    } else {
      old = EraseLocked(it);  // Before the new run under its id.
    }
    absl::StatusOr<std::shared_ptr<Run>> made = NewRunLocked(run_id, Claimant::kMember, creator);
    if (!made.ok()) {
      absl::Status s = made.status();
      lock.Release();
      if (evicted) Forget(*evicted, kEndedWhy);
      if (old) Forget(*old, "was restarted by a new job with the same id");
      return s;
    }
    fresh = std::move(*made);
    fresh->MarkMadeForJoin();
  }
  if (evicted) Forget(*evicted, kEndedWhy);
  if (old) Forget(*old, "was restarted by a new job with the same id");
  return fresh;
}

std::shared_ptr<Run> RunRegistry::Find(const std::string& run_id) const {
  absl::MutexLock lock(&mu_);
  auto it = runs_.find(run_id);
  return it == runs_.end() ? nullptr : it->second;
}

absl::StatusOr<std::shared_ptr<Run>> RunRegistry::FindOrCreate(const std::string& run_id,
                                                               const std::function<void()>& found,
                                                               const std::string& creator) {
  std::shared_ptr<Run> evicted;
  std::shared_ptr<Run> run;
  {
    absl::ReleasableMutexLock lock(&mu_);
    auto it = runs_.find(run_id);
    if (it != runs_.end()) {
      run = it->second;
    } else {
      if (absl::Status s = MakeRoomLocked(run_id, /*for_join=*/false, &evicted); !s.ok()) return s;
      absl::StatusOr<std::shared_ptr<Run>> made = NewRunLocked(run_id, Claimant::kOther, creator);
      if (!made.ok()) {
        lock.Release();
        if (evicted) Forget(*evicted, kEndedWhy);
        return made.status();
      }
      run = std::move(*made);
    }
    run->NoteActivity(clock_());
    if (found) found();
  }
  if (evicted) Forget(*evicted, kEndedWhy);
  return run;
}

std::vector<RunStatus> RunRegistry::Status(bool events) const {
  std::vector<std::shared_ptr<Run>> runs;
  {
    absl::MutexLock lock(&mu_);
    runs.reserve(runs_.size());
    for (const auto& [id, run] : runs_) runs.push_back(run);
  }
  std::vector<RunStatus> out;
  out.reserve(runs.size());
  for (const auto& r : runs) out.push_back(r->Status(events));
  std::sort(out.begin(), out.end(), [](const RunStatus& a, const RunStatus& b) { return a.run_id < b.run_id; });
  return out;
}

std::optional<RunStatus> RunRegistry::StatusOf(const std::string& run_id, bool events) const {
  std::shared_ptr<Run> run = Find(run_id);
  if (!run) return std::nullopt;
  return run->Status(events);
}

int64_t RunRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(runs_.size());
}

std::shared_ptr<Run> RunRegistry::EraseLocked(RunMap::iterator it) {
  std::shared_ptr<Run> run = std::move(it->second);
  if (on_removed_) on_removed_(it->first);
  if (auto c = creator_of_.find(it->first); c != creator_of_.end()) {
    if (auto n = runs_by_creator_.find(c->second); n != runs_by_creator_.end() && --n->second <= 0) {
      runs_by_creator_.erase(n);
    }
    creator_of_.erase(c);
  }
  runs_.erase(it);
  return run;
}

int RunRegistry::SweepEnded() {
  const absl::Time cutoff = clock_() - limits_.ended_run_ttl;
  std::vector<std::shared_ptr<Run>> removed;
  {
    absl::MutexLock lock(&mu_);
    while (std::shared_ptr<Run> run = TakeEndedLocked(cutoff)) removed.push_back(std::move(run));
  }
  for (const auto& run : removed) {
    Logger("rdzv")->info("run '{}' ended more than {} ago: removed", run->run_id(),
                         absl::FormatDuration(limits_.ended_run_ttl));
  }
  return CloseRemoved(std::move(removed), kEndedWhy);
}

int RunRegistry::CloseRemoved(std::vector<std::shared_ptr<Run>> removed, absl::string_view why) {
  for (const auto& run : removed) Forget(*run, why);
  const int n = static_cast<int>(removed.size());
  removed.clear();
  if (n > 0) {
    // The allocator keeps freed heap pages for reuse; a daemon that just
    // dropped runs gives them back. Measured with glibc
    // (tests/e2e/long_lived_test.cc: 200 ended runs of 256 KiB of store
    // each, idle 18 MiB): RSS stays at 78 MiB without, drops to 20 MiB
    // with; the trim took 41 us.
    const absl::Time t = absl::Now();
    const int64_t freed = ReleaseFreeMemory();
    Logger("rdzv")->debug("removed {} run(s); {} KiB of free heap returned in {}", n, freed / 1024,
                          absl::FormatDuration(absl::Now() - t));
  }
  return n;
}

int RunRegistry::SweepIdleStoreOnly() {
  const absl::Time cutoff = clock_() - limits_.store_only_run_ttl;
  std::vector<std::shared_ptr<Run>> removed;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = runs_.begin(); it != runs_.end();) {
      if (it->second->IdleStoreOnly(cutoff)) {
        removed.push_back(EraseLocked(it++));
      } else {
        ++it;
      }
    }
  }
  for (const auto& run : removed) {
    Logger("rdzv")->info("store-only run '{}' had no store call for {}: removed", run->run_id(),
                         absl::FormatDuration(limits_.store_only_run_ttl));
  }
  return CloseRemoved(std::move(removed), "was a store-only run, idle, and was removed");
}

int RunRegistry::SweepNodeless() {
  const absl::Time cutoff = clock_() - limits_.nodeless_run_ttl;
  std::vector<std::shared_ptr<Run>> removed;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = runs_.begin(); it != runs_.end();) {
      if (it->second->IdleNodeless(cutoff)) {
        removed.push_back(EraseLocked(it++));
      } else {
        ++it;
      }
    }
  }
  for (const auto& run : removed) {
    Logger("rdzv")->info("run '{}' had no node and no call for {}: removed", run->run_id(),
                         absl::FormatDuration(limits_.nodeless_run_ttl));
  }
  return CloseRemoved(std::move(removed), "had no node, was idle, and was removed");
}

void RunRegistry::CloseAll(const std::string& why) {
  std::vector<std::shared_ptr<Run>> runs;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, run] : runs_) runs.push_back(run);
  }
  for (auto& r : runs) r->Close(why);
}

}  // namespace meshrun::rendezvous
