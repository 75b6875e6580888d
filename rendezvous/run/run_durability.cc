// Run: its durable state (rendezvous/run/journal.h) - the record saved at
// every durable change, and the restore of a run from it on the replica
// that takes over after a failover.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rendezvous/run/run.h"

namespace meshrun::rendezvous {

void Run::SetJournal(state::RunJournal* journal, std::shared_ptr<std::atomic<int64_t>> seq, int64_t incarnation,
                     std::function<void(const absl::Status&)> on_durability_lost) {
  journal_ = journal;
  journal_seq_ = std::move(seq);
  incarnation_ = incarnation;
  on_durability_lost_ = std::move(on_durability_lost);
  if (journal == nullptr) return;
  // The store's writes are queued to the journal (group commit) as they
  // are applied, and answered once saved (KvStore::SetDurability). A write
  // that fails (or whose outcome is unknown) loses the run's durability as
  // a failed save does; the store's lock is held when the hook is called,
  // so the run's own lock is not taken (the outbox learns it from
  // durability_lost_).
  auto lose = [id = run_id_, lost = durability_lost_, on_lost = on_durability_lost_](const absl::Status& s) {
    lost->store(true);
    const absl::Status unavailable = absl::UnavailableError(
        absl::StrCat("run '", id.substr(0, 64), "': a store write could not be saved (", s.message(),
                     "); this server replica stops serving until its state is loaded again"));
    Logger("rdzv")->error("{}", std::string(unavailable.message()));
    if (on_lost) on_lost(unavailable);
    return unavailable;
  };
  kv_->SetDurability(
      [journal, id = run_id_, incarnation, closed = journal_closed_, lost = durability_lost_, lose](
          int64_t round, const std::vector<std::pair<std::string, std::string>>& set,
          const std::vector<std::string>& erase, KvStore::SavedCallback saved) -> absl::StatusOr<bool> {
        if (closed->load()) {
          return absl::UnavailableError(absl::StrCat("run '", id.substr(0, 64), "' was removed: the write is refused"));
        }
        if (lost->load()) {
          return absl::UnavailableError(absl::StrCat("run '", id.substr(0, 64),
                                                     "': this server replica lost its state's durability and "
                                                     "stops serving it until the state is loaded again"));
        }
        absl::StatusOr<bool> queued = journal->SaveKeysAsync(
            id, incarnation, round, set, erase, [saved = std::move(saved), lose](absl::Status s) mutable {
              saved(s.ok() ? s : lose(s));
            });
        if (queued.ok()) return queued;
        // Refused for what it is (too big for etcd's limits, the writer's
        // queue full): nothing was written and nothing changes; the caller
        // hears why.
        if (absl::IsInvalidArgument(queued.status()) || absl::IsResourceExhausted(queued.status())) {
          return queued.status();
        }
        return lose(queued.status());
      },
      [journal, id = run_id_, incarnation, closed = journal_closed_](int64_t round) {
        if (closed->load()) return;
        if (absl::Status s = journal->DropKeysBelow(id, incarnation, round); !s.ok()) {
          Logger("rdzv")->warn("run '{}': could not drop the store's keys below round {}: {}", id, round,
                               std::string(s.message()));
        }
      });
}

void Run::SetGate(const ServingCheck* gate) { gate_ = gate; }

state::RunRecord Run::RecordLocked() const {
  state::RunRecord r;
  r.run_id = run_id_;
  r.incarnation = incarnation_;
  r.state = StateName(state_);
  r.config = config_;
  r.round = round_;
  r.restart_count = restarts_.spent();
  if (restarts_.has_root_cause()) r.root_cause = restarts_.root_cause();
  r.created = created_;
  r.timeline = timeline_.Events();
  r.timeline_dropped = timeline_.dropped();
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
  if (DurabilityLostLocked()) {
    // The state in memory may be ahead of the journal: no change of it is
    // acknowledged any more (the replica reloads).
    later.record.reset();
    later.lost = absl::UnavailableError(absl::StrCat(
        "run '", run_id_.substr(0, 64), "': this server replica lost its state's durability and stops serving it "
        "until the state is loaded again; go on with the next leader"));
    return;
  }
  state::RunRecord r = RecordLocked();
  r.seq = journal_seq_ ? journal_seq_->fetch_add(1) + 1 : 1;
  // Every event from here on waits for this save (or a later one).
  outbox_.Await(r.seq);
  // A second change in the same operation replaces the first one's record:
  // the later record holds both.
  later.record = std::move(r);
}

namespace {
constexpr char kDurabilityLost[] =
    "this rendezvous server replica lost its state's durability (a save to etcd failed or its outcome is unknown) "
    "and stops serving until its state is loaded again";
}  // namespace

bool Run::DurabilityLostLocked() {
  if (durability_lost_->load() && !outbox_.failed()) outbox_.Fail(kDurabilityLost);
  return outbox_.failed();
}

void Run::RunAll(Deferred& later) {
  std::vector<absl::AnyInvocable<void(const absl::Status& saved)>> calls = std::move(later.calls);
  std::optional<state::RunRecord> record = std::move(later.record);
  const absl::Status lost = later.lost;
  later.calls.clear();
  later.record.reset();
  later.lost = absl::OkStatus();
  if (!lost.ok() || !record) {
    for (auto& fn : calls) fn(lost);
    return;
  }
  // Queued to the journal (group commit): the calls run once it is saved,
  // on the journal's thread, or here when it is refused at once.
  const int64_t seq = record->seq;
  const int64_t round = record->round;
  journal_->SaveAsync(*record, [self = shared_from_this(), calls = std::move(calls), seq,
                                round](absl::Status s) mutable {
    const absl::Status saved = self->OnSaved(s, seq, round);
    for (auto& fn : calls) fn(saved);
  });
}

absl::Status Run::OnSaved(const absl::Status& outcome, int64_t seq, int64_t round) {
  if (!outcome.ok()) {
    return LoseDurability(absl::Status(
        outcome.code(), absl::StrCat("run '", run_id_.substr(0, 64), "' round ", round, ": ", outcome.message())));
  }
  absl::MutexLock lock(&mu_);
  if (DurabilityLostLocked()) return absl::UnavailableError(kDurabilityLost);
  outbox_.Saved(seq);
  return absl::OkStatus();
}

absl::Status Run::LoseDurability(const absl::Status& why) {
  const absl::Status lost = absl::UnavailableError(
      absl::StrCat("the run's state could not be saved (", why.message(),
                   "); this server replica stops serving until its state is loaded again; "
                   "go on with the next leader"));
  Logger("rdzv")->error("{}", std::string(lost.message()));
  durability_lost_->store(true);
  {
    absl::MutexLock lock(&mu_);
    outbox_.Fail(kDurabilityLost);
  }
  if (on_durability_lost_) on_durability_lost_(lost);
  return lost;
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
  ScheduleSaveSoon(absl::Now() + kSaveSoonDelay);
}

void Run::ScheduleSaveSoon(absl::Time at) {
  std::weak_ptr<Run> weak = weak_from_this();
  (save_timer_ != nullptr ? save_timer_ : timer_)->Schedule(at, [weak] {
    if (auto self = weak.lock()) self->SaveSoon();
  });
}

void Run::SaveSoon() {
  state::RunRecord r;
  {
    absl::MutexLock lock(&mu_);
    if (!save_soon_) return;  // Saved already (SoonSaved's call and a timer's may both come).
    if (journal_ == nullptr || status_only_ || journal_closed_->load() || DurabilityLostLocked()) {
      save_soon_ = false;
      return;
    }
    if (gate_ != nullptr && !gate_->serving()) {
      // Paused (its lease unconfirmed), standing by, or shutting down (the
      // journal may be gone): nothing is written; tried again while the
      // run lives.
      ScheduleSaveSoon(absl::Now() + absl::Milliseconds(500));
      return;
    }
    if (soon_in_flight_) return;  // save_soon_ stays set: SoonSaved starts it.
    save_soon_ = false;
    soon_in_flight_ = true;
    r = RecordLocked();
    r.seq = journal_seq_ ? journal_seq_->fetch_add(1) + 1 : 1;
  }
  // Queued to the journal: nothing waits on this save, but its outcome may
  // be unknown, and then the state in memory may be ahead of the journal's.
  journal_->SaveAsync(r, [self = shared_from_this(), seq = r.seq, round = r.round](absl::Status s) {
    (void)self->OnSaved(s, seq, round);
    self->SoonSaved();
  });
}

void Run::SoonSaved() {
  absl::MutexLock lock(&mu_);
  soon_in_flight_ = false;
  // On the timer's thread, as every SaveSoon (this is the journal's).
  if (save_soon_) ScheduleSaveSoon(absl::Now());
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
  if (r.created != absl::InfinitePast()) created_ = r.created;
  timeline_.Restore(r.timeline, r.timeline_dropped);
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
  if (!r.members.empty()) {
    had_node_ = true;
    kv_->MarkMemberRun();  // A round of it closed: its store is a member's, as before the failover.
  }
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
