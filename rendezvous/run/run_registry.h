// RunRegistry: every run of a server by run id, within max_runs; ended
// runs are removed ended_run_ttl after they ended. Pure domain: no gRPC.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rendezvous/policy/limits.h"
#include "rendezvous/run/run.h"
#include "rendezvous/policy/timer.h"

namespace meshrun::rendezvous {

// All runs of a server, by run id. Thread-safe.
//
// A long-lived server forgets what has ended: a run that finished or failed
// stays (and `meshrun status` shows it) for limits.ended_run_ttl, then it
// is removed, its parked calls answered ABORTED, and its store freed. A
// store-only run (FindOrCreate, no node ever joined) never ends; it is
// removed once no store call has reached it for limits.store_only_run_ttl
// and no read is parked in it. A run whose nodes have all left (joins
// cancelled or withdrawn before their round closed, streams ended; not
// ended) is removed the same way once it has had no node and no call for
// limits.nodeless_run_ttl.
class RunRegistry {
 public:
  // The registry's idea of now. Run end times and the sweep both read it;
  // tests inject one that jumps ahead.
  using Clock = std::function<absl::Time()>;

  // `timer` must outlive the registry: it runs the periodic sweep (every
  // ended_run_ttl / 10, at least every second, at most every 10 ms), so a
  // run is removed between ended_run_ttl and ended_run_ttl + 1 s after it
  // ended. `clock`: absl::Now when empty.
  // `budget`, when given, must outlive the registry: every run is charged
  // kRun (a run a join or event stream makes as a member's, a store-only
  // one as anyone's) and, through the run, its nodes and store.
  explicit RunRegistry(DeadlineTimer* timer, const ServerLimits& limits = ServerLimits(), Clock clock = nullptr,
                       MemoryBudget* budget = nullptr);
  // Stops the sweep and closes every run.
  ~RunRegistry();
  RunRegistry(const RunRegistry&) = delete;
  RunRegistry& operator=(const RunRegistry&) = delete;

  // The run a join goes to: the existing one, or a fresh one when the id is
  // new or its previous run ended (finished or failed) and `last_round` is
  // -1 (a new job reusing the id). A new run needs room: at max_runs the
  // run that ended first is removed (its parked calls ABORTED), else the
  // least recently used store-only run (a job's join comes first), and
  // when neither exists the new one is refused with RESOURCE_EXHAUSTED
  // naming max_runs. `creator` (the client's connection, e.g. gRPC's peer
  // "ipv4:10.0.0.1:41234"; empty: not counted) may have created at most
  // max_runs_per_connection of the runs held (RESOURCE_EXHAUSTED naming
  // it). RESOURCE_EXHAUSTED too when the memory budget refuses the run.
  // INVALID_ARGUMENT for a run id longer than max_run_id_bytes.
  absl::StatusOr<std::shared_ptr<Run>> ForJoin(const std::string& run_id, int64_t last_round,
                                               const std::string& creator = "");
  // The run, or nullptr. O(1).
  std::shared_ptr<Run> Find(const std::string& run_id) const;
  // The run a store call goes to, created when absent (a store-only run for
  // other launchers), with the call noted (Run::NoteActivity, by the
  // registry's clock, under its lock: a run being found is never removed
  // as idle at the same time); the same limits as ForJoin. `found`, when
  // given, runs under the registry's lock once the run is found or made
  // (the store's traffic count: counted for this run, never for one
  // removed meanwhile); it must not call into the registry.
  // A store call never removes a store-only run to make room.
  absl::StatusOr<std::shared_ptr<Run>> FindOrCreate(const std::string& run_id,
                                                    const std::function<void()>& found = nullptr,
                                                    const std::string& creator = "");
  // Every run's status, sorted by run id: O(runs x their nodes), for
  // listings and metrics; with `events`, their timelines too.
  std::vector<RunStatus> Status(bool events = false) const;
  // One run's status, or nullopt for an unknown id: O(that run's nodes),
  // whatever else the server holds.
  std::optional<RunStatus> StatusOf(const std::string& run_id, bool events = false) const;
  // Runs held now (live and ended ones not yet removed).
  int64_t size() const;

  // Removes every run that ended at least ended_run_ttl ago (by the clock)
  // and returns how many it removed. O(removed). The periodic sweep calls
  // it; tests may too.
  int SweepEnded();
  // Removes every store-only run idle for store_only_run_ttl (by the clock;
  // Run::IdleStoreOnly) and returns how many. O(runs held): the periodic
  // sweep calls it, and SweepNodeless, every min(store_only_run_ttl,
  // nodeless_run_ttl) / 10 (1 s to 1 min); tests may too.
  int SweepIdleStoreOnly();
  // Removes every run its nodes left that had no node and no call for
  // nodeless_run_ttl (by the clock; Run::IdleNodeless) and returns how many.
  // O(runs held), a run's lock taken only for one idle that long.
  int SweepNodeless();

  // Closes every run (server shutdown).
  void CloseAll(const std::string& why);

  // Durable state (rendezvous/run/journal.h): every run made from now on
  // saves its record in `journal` (Run::SetJournal), which must outlive the
  // registry; a run removed for good (ended_run_ttl, idle, room made,
  // replaced; not Clear) is dropped from it. nullptr (the default): none. Set it before serving.
  // `on_durability_lost` is called when a run's save fails or its outcome
  // is unknown (Run::SetJournal): a replica stops serving and reloads.
  // `save_timer` (must outlive every run; nullptr: the registry's timer)
  // runs the saves nothing waits on (Run::SetSaveTimer).
  void SetJournal(state::RunJournal* journal,
                  std::function<void(const absl::Status&)> on_durability_lost = nullptr,
                  DeadlineTimer* save_timer = nullptr) {
    journal_ = journal;
    on_durability_lost_ = std::move(on_durability_lost);
    save_timer_ = save_timer;
  }
  // A replica's gate (Run::SetGate) for every run made from now on; must
  // outlive the registry. Set it before serving.
  void SetGate(const ServingCheck* gate) { gate_ = gate; }
  // Replaces every run by those `records` describe (a replica taking the
  // lead after a failover): the runs held are closed with `why` (their
  // parked calls ABORTED, streams ended) and removed; each record becomes a
  // run (Run::Restore) of the record's incarnation, an ended one queued for
  // removal after ended_run_ttl as if it had just ended, a store-only one
  // idle from now. Later records are numbered after
  // the highest seq restored. Thread-safe.
  // `takeover` (kind and detail, e.g. {"failover", "replica B leads after
  // A; ..."}), when its kind is not empty, is added to the timeline of
  // every run restored that a node ever joined.
  void Restore(const std::vector<state::RunRecord>& records, const std::string& why,
               const TimelineEvent& takeover = {});
  // Closes and removes every run (a replica that stops leading or shuts
  // down), with `why`: parked calls are answered UNAVAILABLE (not ABORTED:
  // the runs go on on the next leader). Thread-safe.
  void Clear(const std::string& why);

  // `hook` is called with the id of every run removed from now on (swept
  // after ended_run_ttl, removed to make room at max_runs, replaced by a new
  // job under the same id, or a store-only run removed as idle), under the
  // registry's lock, on the thread that removed it, before a new run under
  // that id can exist; it must not call into the registry. Set it once,
  // before the registry serves calls (not thread-safe against removals).
  void SetOnRemoved(std::function<void(const std::string& run_id)> hook) { on_removed_ = std::move(hook); }

 private:
  // Runs in the order they ended: (end time, id, the run). Shared with each
  // run's on-ended hook, which may fire after the registry is gone.
  struct EndedRuns {
    absl::Mutex mu;
    std::deque<std::tuple<absl::Time, std::string, std::weak_ptr<Run>>> queue ABSL_GUARDED_BY(mu);
  };

  // `for_join`: a store-only run may be removed to make room.
  absl::Status MakeRoomLocked(const std::string& run_id, bool for_join, std::shared_ptr<Run>* evicted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The least recently used store-only run, taken out of runs_; nullptr
  // when there is none. O(runs).
  std::shared_ptr<Run> TakeLeastRecentStoreOnlyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new run under `run_id`, whose end is queued in ended_; charged to the
  // budget as `who`'s and counted against `creator`.
  // `incarnation`: the restored run's (0: a new one, NextIncarnationLocked);
  // a restored run is charged whatever the budget holds, never refused
  // (etcd holds it: it was acknowledged).
  absl::StatusOr<std::shared_ptr<Run>> NewRunLocked(const std::string& run_id, Claimant who,
                                                    const std::string& creator, int64_t incarnation = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new run's incarnation (state.h): the clock in Unix nanoseconds, above
  // every one made or restored before.
  int64_t NextIncarnationLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes a run taken out of runs_ for good ("run '<id>' <why>": its parked
  // calls' answer) and drops its record and keys from the journal. Called
  // without mu_; the journal's call is bounded by its own timeouts.
  void Forget(Run& run, absl::string_view why);
  // Takes the first ended run off the queue that is still held (and ended
  // before `cutoff`) out of runs_; nullptr when there is none.
  std::shared_ptr<Run> TakeEndedLocked(absl::Time cutoff) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ended run that makes room at max_runs: the first ended whose agents
  // have left (Run::agents_left) or that ended ended_run_room_grace ago;
  // nullptr when none (looks at the 64 that ended first at most).
  std::shared_ptr<Run> TakeEndedForRoomLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ArmSweep();
  absl::Time next_idle_sweep_ = absl::InfinitePast();  // Only the sweep's thread.
  using RunMap = absl::flat_hash_map<std::string, std::shared_ptr<Run>>;
  // Takes the run at `it` out of runs_ and tells on_removed_: every way a
  // run is removed goes through here. The caller closes it without mu_.
  std::shared_ptr<Run> EraseLocked(RunMap::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes runs just taken out of runs_ ("run '<id>' <why>": their parked
  // calls' answer), gives the freed heap back, and returns how many.
  // Called without mu_.
  int CloseRemoved(std::vector<std::shared_ptr<Run>> removed, absl::string_view why);

  DeadlineTimer* const timer_;
  const ServerLimits limits_;
  std::function<void(const std::string&)> on_removed_;
  state::RunJournal* journal_ = nullptr;
  std::function<void(const absl::Status&)> on_durability_lost_;  // Set before serving.
  DeadlineTimer* save_timer_ = nullptr;                           // Set before serving.
  const ServingCheck* gate_ = nullptr;
  // The seq of the records runs save (Run::SetJournal): one counter for the server.
  const std::shared_ptr<std::atomic<int64_t>> journal_seq_ = std::make_shared<std::atomic<int64_t>>(0);
  const Clock clock_;
  const std::shared_ptr<std::atomic<int64_t>> server_bytes_;
  const std::shared_ptr<EndedRuns> ended_ = std::make_shared<EndedRuns>();
  mutable absl::Mutex mu_;
  RunMap runs_ ABSL_GUARDED_BY(mu_);
  int64_t last_incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  MemoryBudget* const budget_;
  // Runs held, by the connection that created them (max_runs_per_connection),
  // and each such run's creator.
  absl::flat_hash_map<std::string, int64_t> runs_by_creator_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> creator_of_ ABSL_GUARDED_BY(mu_);
  // The periodic sweep's timer entry; no new one once stopping_.
  absl::Mutex sweep_mu_;
  DeadlineTimer::Id sweep_id_ ABSL_GUARDED_BY(sweep_mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(sweep_mu_) = false;
};

}  // namespace meshrun::rendezvous
