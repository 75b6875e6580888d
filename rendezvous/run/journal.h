// The run's journal port: the rendezvous server's durable state
// (docs/design.md section 4d), what a replica that takes over after a
// failover must know for the agents of a running job to carry on with it,
// untouched. Pure domain: no gRPC, no etcd.
//
// Durable (in a RunRecord, written before the server acknowledges it):
//   - the run's configuration (the job's shape: --nnodes, --max_restarts,
//     timeouts), its round number and state;
//   - the members of the closed round: node, assignment (node rank, ranks,
//     MASTER_ADDR/PORT) and session credential, and whether each has reached
//     the exit barrier;
//   - restarts spent, and the root cause of the last incident (a permanent
//     failure ends the run: its state says so);
//   - when the run was made, and its timeline (run_timeline.h), so that
//     `meshrun status --events` tells the same story after a failover.
// Soft (rebuilt after a failover, not journaled): heartbeats (a restored
// member counts as seen at the restore), event streams (agents open them
// again), joins of an open round and parked calls (agents send them again).
// Store keys are durable too: every store write goes to the journal
// (SaveKeysAsync, queued as the store applies it) and is acknowledged once
// saved, so keys that were set
// stay readable and parked reads complete on the next leader; keys of
// rounds below the current one are dropped with them (DropKeysBelow). A
// store-only run (no node ever joined) has a record too, written with its
// first keys (RunRecord::store_only), and is restored with them: every key
// a journal holds belongs to a record.
//
// Incarnations. A run id may be reused (a new job under an ended run's id,
// a store-only run removed as idle and made again): each Run the server
// makes gets a new incarnation, and its keys and its removal (Drop) are
// about that incarnation only, so removing the old one never touches what
// the new one wrote, whatever the order the writes reach the journal in.
// A removed run's record and keys are dropped (RunRegistry); keys whose
// record is gone or of another incarnation (a removal that did not happen
// before a failover) are dropped by the next leader's Load, and a removed
// run whose record stayed comes back as a run and is removed again.
//
// The port is the run's (a Run saves through it); rendezvous/state/
// implements it: MemoryJournal (state.h, a copy in memory for tests of the
// restore) and etcd (rendezvous/state/etcd/etcd_journal.h). None at all is
// the server without --state: the Runs in memory are the state, nothing is
// copied, so the default stays as fast as it was. Its names are in
// namespace state, the durable state's vocabulary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/types.h"

namespace meshrun::rendezvous::state {

// One member of a run's current (closed) round.
struct MemberRecord {
  NodeDesc node;
  Assignment assignment;  // Its session field holds the node's current credential.
  bool finished = false;  // At the exit barrier of `assignment.round`.
};

// One key of a run's store (rendezvous/store/kv_store.h), in its round.
struct StoredKey {
  int64_t round = 0;
  std::string key;
  std::string value;  // Any bytes.
};

// Everything durable about one run (see above).
struct RunRecord {
  std::string run_id;
  // Which Run under this id (see above): > 0, unique per run id.
  int64_t incarnation = 0;
  // A store-only run's record (written with its first keys): only run_id,
  // incarnation and keys are set.
  bool store_only = false;
  // Raised by one at every change of the run's durable state, under the
  // run's lock: a journal keeps the record with the highest seq.
  int64_t seq = 0;
  // "joining" (a round is open: after a restart or a re-form, or before the
  // first close), "running", "finished" or "failed" (Run::State's names).
  std::string state = "joining";
  RunConfig config;
  int64_t round = 0;
  int restart_count = 0;
  std::optional<WorkerFailure> root_cause;
  // The members of the last closed round, by node rank. In state
  // "joining" after a restart or re-form: that round's members, who are
  // expected to join again with their credentials.
  std::vector<MemberRecord> members;
  // When the run was made, and its timeline (run_timeline.h), oldest
  // first, with the count of older entries dropped.
  absl::Time created = absl::InfinitePast();
  std::vector<TimelineEvent> timeline;
  int64_t timeline_dropped = 0;
  // The run's store: filled by RunJournal::Load only (saved by SaveKeys,
  // not part of the record's JSON).
  std::vector<StoredKey> keys;
};

// Where a server's durable state goes. Implementations are thread-safe.
class RunJournal {
 public:
  virtual ~RunJournal() = default;
  // Keeps `record` as its run's state unless the journal holds a record of
  // that run with a higher or equal seq (then OK, nothing written). Called
  // once per durable change (one per closed round, not one per join),
  // before the change is acknowledged to any client. Errors: the store's
  // (for etcd: FAILED_PRECONDITION when this replica no longer leads,
  // UNAVAILABLE when etcd is unreachable or without quorum).
  virtual absl::Status Save(const RunRecord& record) = 0;
  // How a write that was not waited for went: OK once saved; else why not
  // (its outcome may be unknown).
  using SavedCallback = absl::AnyInvocable<void(absl::Status)>;
  // Save without waiting (group commit), for callers that must not block on
  // the store (gRPC's and timers' threads). `done` is called exactly once
  // with what Save would return: on another thread once the store has the
  // record (or failed to take it), never under a lock of the caller's; or
  // at once, on the caller's thread, when nothing is to be written or the
  // write is refused (etcd: the writer's queue full, RESOURCE_EXHAUSTED;
  // the writer stopped after a failed write, UNAVAILABLE). Records and
  // store writes reach the store in the order of the calls; a record
  // superseded by a higher seq already queued is answered once that one is
  // saved. `done` must not block on the store. The default saves at once
  // with Save.
  virtual void SaveAsync(const RunRecord& record, SavedCallback done) { done(Save(record)); }
  // Forgets incarnation `incarnation` of a run (removed from the server:
  // ended_run_ttl, idle store-only, room made at max_runs, replaced by a
  // new job under the same id): its keys, and its record unless the record
  // is of another incarnation. Errors as Save; the etcd journal queues it
  // and answers OK at once (done on a thread of its own while its replica
  // leads, tried again until it is: the registry calls this on the server's
  // timer thread).
  virtual absl::Status Drop(const std::string& run_id, int64_t incarnation) = 0;
  // A write of a run's store in `round`: keys set with their values, keys
  // deleted. Called under the store's lock, before the write is applied,
  // acknowledged or wakes a parked read. A run with no record of this
  // incarnation yet gets a store_only one with these keys. Errors as Save
  // (the write is then refused).
  virtual absl::Status SaveKeys(const std::string& run_id, int64_t incarnation, int64_t round,
                                const std::vector<std::pair<std::string, std::string>>& set,
                                const std::vector<std::string>& erase) = 0;
  // SaveKeys without waiting (group commit), called the same way. Returns
  // true when the write is saved already (`saved` is not called); false
  // when `saved` will be called, on another thread and never under a lock
  // of the caller's, once the write is saved (OK) or failed (its outcome
  // may be unknown); an error when refused (nothing written, `saved` never
  // called). The default saves at once with SaveKeys.
  virtual absl::StatusOr<bool> SaveKeysAsync(const std::string& run_id, int64_t incarnation, int64_t round,
                                             const std::vector<std::pair<std::string, std::string>>& set,
                                             const std::vector<std::string>& erase, SavedCallback saved) {
    (void)saved;
    if (absl::Status s = SaveKeys(run_id, incarnation, round, set, erase); !s.ok()) return s;
    return true;
  }
  // Drops the run's keys of rounds below `round` (a new round closed).
  virtual absl::Status DropKeysBelow(const std::string& run_id, int64_t incarnation, int64_t round) = 0;
  // Every run's latest record, with its store's keys (those of the
  // record's incarnation). Keys of no record (left by a removal that did
  // not happen) are not returned; Load drops them when it can (best
  // effort). Errors as Save.
  virtual absl::StatusOr<std::vector<RunRecord>> Load() = 0;
};

}  // namespace meshrun::rendezvous::state
