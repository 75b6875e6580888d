// Run: its durable state (rendezvous/state/state.h) - the record saved at
// every durable change, and the restore of a run from it on the replica
// that takes over after a failover.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rendezvous/run/run.h"

namespace meshrun::rendezvous {

void Run::SetJournal(state::RunJournal* journal, std::shared_ptr<std::atomic<int64_t>> seq, int64_t incarnation) {
  journal_ = journal;
  journal_seq_ = std::move(seq);
  incarnation_ = incarnation;
  if (journal == nullptr) return;
  // The store's writes go to the journal before they are applied.
  kv_->SetDurability(
      [journal, id = run_id_, incarnation, closed = journal_closed_](
          int64_t round, const std::vector<std::pair<std::string, std::string>>& set,
          const std::vector<std::string>& erase) {
        if (closed->load()) {
          return absl::UnavailableError(absl::StrCat("run '", id.substr(0, 64), "' was removed: the write is refused"));
        }
        return journal->SaveKeys(id, incarnation, round, set, erase);
      },
      [journal, id = run_id_, incarnation, closed = journal_closed_](int64_t round) {
        if (closed->load()) return;
        if (absl::Status s = journal->DropKeysBelow(id, incarnation, round); !s.ok()) {
          Logger("rdzv")->warn("run '{}': could not drop the store's keys below round {}: {}", id, round,
                               std::string(s.message()));
        }
      });
}

void Run::SetGate(const state::ServingGate* gate) { gate_ = gate; }

state::RunRecord Run::RecordLocked() const {
  state::RunRecord r;
  r.run_id = run_id_;
  r.incarnation = incarnation_;
  r.state = StateName(state_);
  r.config = config_;
  r.round = round_;
  r.restart_count = restarts_.spent();
  if (restarts_.has_root_cause()) r.root_cause = restarts_.root_cause();
  // A round being re-formed: the members of the round before, who join again.
  const NodeList<Member>& members = state_ == State::kJoining ? reforming_ : members_;
  r.members.reserve(members.size());
  for (const Member& m : members) {
    state::MemberRecord mr;
    mr.node = m.node;
    mr.assignment = m.assignment;
    if (const Membership::Node* n = membership_.Find(m.node.node_id)) mr.assignment.session = n->session;
    mr.finished = m.finished;
    r.members.push_back(std::move(mr));
  }
  return r;
}

state::RunRecord Run::Record() const {
  absl::MutexLock lock(&mu_);
  return RecordLocked();
}

void Run::JournalLocked(Deferred& later) {
  if (journal_ == nullptr || status_only_ || journal_closed_->load()) return;
  state::RunRecord r = RecordLocked();
  r.seq = journal_seq_ ? journal_seq_->fetch_add(1) + 1 : 1;
  // First among the deferred calls: saved before the answers they make.
  later.insert(later.begin(), [journal = journal_, r = std::move(r)]() {
    if (absl::Status s = journal->Save(r); !s.ok()) {
      Logger("rdzv")->error("run '{}' round {}: could not save its state: {}", r.run_id, r.round,
                            std::string(s.message()));
    }
  });
}

namespace {
// How long a JournalSoonLocked change waits for others to share its save:
// 1,024 exit-barrier arrivals within a second cost tens of records, not
// 1,024 records of 1,024 members each, saved one at a time on gRPC's
// threads (13 s for the barrier, and heartbeats waiting behind the saves:
// bench/rdzv_scale --state_modes=etcd, docs/performance.md).
constexpr absl::Duration kSaveSoonDelay = absl::Milliseconds(20);
}  // namespace

void Run::JournalSoonLocked() {
  if (journal_ == nullptr || status_only_ || save_soon_ || journal_closed_->load()) return;
  save_soon_ = true;
  std::weak_ptr<Run> weak = weak_from_this();
  timer_->Schedule(absl::Now() + kSaveSoonDelay, [weak] {
    if (auto self = weak.lock()) self->SaveSoon();
  });
}

void Run::SaveSoon() {
  state::RunRecord r;
  {
    absl::MutexLock lock(&mu_);
    if (journal_ == nullptr || status_only_ || journal_closed_->load()) {
      save_soon_ = false;
      return;
    }
    if (gate_ != nullptr && !gate_->serving()) {
      // Paused (its lease unconfirmed), standing by, or shutting down (the
      // journal may be gone): nothing is written; tried again while the
      // run lives.
      std::weak_ptr<Run> weak = weak_from_this();
      timer_->Schedule(absl::Now() + absl::Milliseconds(500), [weak] {
        if (auto self = weak.lock()) self->SaveSoon();
      });
      return;
    }
    save_soon_ = false;
    r = RecordLocked();
    r.seq = journal_seq_ ? journal_seq_->fetch_add(1) + 1 : 1;
  }
  // On the timer's thread: bounded by the journal's own timeouts.
  if (absl::Status s = journal_->Save(r); !s.ok()) {
    Logger("rdzv")->error("run '{}' round {}: could not save its state: {}", r.run_id, r.round,
                          std::string(s.message()));
  }
}

void Run::Restore(const state::RunRecord& r) {
  absl::MutexLock lock(&mu_);
  if (r.store_only) {
    // Its keys alone: no node ever joined, nothing else to restore.
    for (const state::StoredKey& k : r.keys) kv_->Restore(k.round, k.key, k.value);
    Logger("rdzv")->info("store-only run '{}' restored ({} store keys)", run_id_, r.keys.size());
    return;
  }
  configured_ = true;
  config_ = r.config;
  round_ = r.round;
  restarts_.Restore(r.restart_count, r.root_cause);
  const absl::Time now = absl::Now();
  members_.clear();
  reforming_.clear();
  finished_count_ = 0;
  for (const state::MemberRecord& m : r.members) {
    membership_.Restore(m.node.node_id, m.assignment.session, now);
    Member member{m.node, m.assignment, m.finished};
    member.assignment.session.clear();  // The membership holds it.
    if (r.state == "joining") {
      member.finished = false;
      reforming_.push_back(std::move(member));
    } else {
      if (member.finished) ++finished_count_;
      members_.push_back(std::move(member));
    }
  }
  if (!r.members.empty()) had_node_ = true;
  // The store: keys of the current round (older ones are dropped anyway).
  for (const state::StoredKey& k : r.keys) {
    if (k.round >= r.round) kv_->Restore(k.round, k.key, k.value);
  }
  if (r.state == "running") {
    state_ = State::kRunning;
    ArmLivenessLocked();
  } else if (r.state == "joining") {
    state_ = State::kJoining;
    reform_target_ = reforming_.empty() ? 0 : std::min<int>(config_.max_nodes, static_cast<int>(reforming_.size()));
  } else {
    state_ = r.state == "finished" ? State::kFinished : State::kFailed;
  }
  Logger("rdzv")->info("run '{}' restored at round {} ({}, {} members, {} restarts spent, {} store keys)", run_id_,
                       round_, r.state, r.members.size(), restarts_.spent(), r.keys.size());
}

}  // namespace meshrun::rendezvous
