// Run: the event streams of a run (its Watch side): members first, a
// bounded set of non-members' streams whose oldest makes room, a node's
// stream replaced by its newer one, the catch-up a stream gets, and a
// stream's end (a member's agent gone). See run.h.
#include "rendezvous/run/run.h"

#include "absl/strings/str_cat.h"

namespace meshrun::rendezvous {

std::pair<int64_t, int64_t> Run::watcher_counts() const {
  absl::MutexLock lock(&mu_);
  return {streams_.members(), streams_.nonmembers()};
}


absl::Status Run::Watch(const std::string& node_id, std::shared_ptr<EventSink> sink, int64_t known_round,
                        const std::string& session, const std::function<absl::Status(Claimant)>& admit,
                        const std::string& peer) {
  absl::MutexLock lock(&mu_);
  const bool member = !status_only_ && IsParticipantLocked(node_id);
  const bool replacing = streams_.Has(node_id);
  if (member) {
    const int64_t members_open = streams_.members();
    if (!replacing && members_open >= limits_.max_watchers_per_run) {
      return absl::ResourceExhaustedError(absl::StrCat("run '", run_id_.substr(0, 64), "' has ", members_open,
                                                       " event streams of members open: max_watchers_per_run=",
                                                       limits_.max_watchers_per_run));
    }
  }
  bool new_node = false;
  bool hand_out = false;  // The stream of a joining node, from its join's connection.
  if (status_only_) {
    // Over, its nodes gone and their credentials with them: any stream
    // learns how it ended (below), as Status would tell it.
  } else if (const Membership::Node* k = membership_.Find(node_id);
             k != nullptr && session.empty() && !peer.empty() && k->peer == peer &&
             (IsParticipantLocked(node_id) || k->last_seen == absl::InfinitePast())) {
    hand_out = true;
  } else if (k != nullptr || !session.empty()) {
    // A participant's credential of the round before is accepted too, as for
    // heartbeats: a stream re-opened while its join was being answered.
    if (absl::Status s = membership_.Check(node_id, session); !s.ok() && !PreviousSessionLocked(node_id, session)) {
      return s;
    }
  } else {
    new_node = true;
  }
  if (admit) {
    if (absl::Status s = admit(member ? Claimant::kMember : Claimant::kOther); !s.ok()) return s;
  }
  if (new_node) {
    if (absl::Status s = membership_.Admit(node_id, peer, Claimant::kOther); !s.ok()) return s;
  }
  if (!member && !streams_.IsNonMember(node_id)) {
    // Room among non-members: the oldest one's stream goes (bounded: each
    // round ends one stream or stops).
    auto why = [this](const std::string& id, int64_t open) {
      return absl::StrCat("run '", run_id_.substr(0, 64), "' has ", open,
                          " event streams of nodes that have not joined: max_nonmember_watchers_per_run=",
                          limits_.max_nonmember_watchers_per_run, "; the oldest (node '", id.substr(0, 64),
                          "') was ended to make room; join, then re-open it");
    };
    while (streams_.nonmembers() >= limits_.max_nonmember_watchers_per_run) {
      std::optional<std::string> evicted = streams_.EvictOldestNonMember(why);
      if (!evicted) break;
      // A node that had not joined is forgotten with its stream.
      if (!IsParticipantLocked(*evicted) && !membership_.IsLost(*evicted)) membership_.Forget(*evicted);
    }
  }
  // What the new stream learns first goes through the outbox: after the
  // events of a save in flight, and only once the state it tells is durable.
  auto push = [this, &sink](const RunEvent& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { outbox_.Push({sink}, e); };
  if (new_node || hand_out) {
    RunEvent hello;
    hello.kind = RunEvent::Kind::kSession;
    hello.round = round_;
    hello.session = membership_.Find(node_id)->session;
    push(hello);
  }
  if (auto u = unsent_answers_.find(node_id); u != unsent_answers_.end()) {
    // Its join, taken to be answered on its stream, was answered before
    // this stream opened. The node knows that round from here on: the
    // round's close follows as the others saw it, or, should the run have
    // moved past that round meanwhile (a failure elsewhere restarted it),
    // the catch-up below says so.
    const int64_t answered = u->second.ok() ? u->second->round : -1;
    push(JoinAnsweredLocked(std::move(u->second)));
    unsent_answers_.erase(u);
    if (answered >= 0 && known_round < answered) {
      if (state_ == State::kRunning && round_ == answered && members_.contains(node_id)) {
        push(RoundClosedLocked());
      }
      known_round = answered;
    }
  }
  // A member of the round before, which the run is re-forming (a restart
  // it has not heard of: its join was answered on the call just before).
  if (known_round < 0 && state_ == State::kJoining && reforming_.contains(node_id)) known_round = round_ - 1;
  RunEvent catch_up;
  catch_up.round = round_;
  catch_up.restart_count = restarts_.spent();
  if (restarts_.has_root_cause()) catch_up.root_cause = restarts_.root_cause();
  if (known_round < 0 && !status_only_) {
    // A node before its first round learns its round from Join; the
    // progress of the open round is all it needs now.
    if (state_ == State::kJoining && pending_.contains(node_id)) {
      RunEvent progress;
      progress.kind = RunEvent::Kind::kJoinProgress;
      progress.round = round_;
      progress.joined = static_cast<int>(pending_.size());
      progress.min_nodes = config_.min_nodes;
      progress.max_nodes = config_.max_nodes;
      push(progress);
    } else if (state_ == State::kRunning && members_.contains(node_id)) {
      // Its join was answered before its stream opened (the agent opens it
      // right after sending the join): the round's close, as the others saw it.
      push(RoundClosedLocked());
    }
  } else if (state_ == State::kFailed) {
    catch_up.kind = RunEvent::Kind::kRunFailed;
    push(catch_up);
  } else if (state_ == State::kFinished) {
    catch_up.kind = RunEvent::Kind::kRunFinished;
    push(catch_up);
  } else if (round_ > known_round) {
    catch_up.kind = RunEvent::Kind::kRestart;
    push(catch_up);
  }
  // One stream per node: an older one still open ends here. (An agent
  // re-opens only after its stream ended; left open, a replaced stream would
  // be counted by nobody, past max_watchers_per_run, and outlive the run.)
  streams_.Open(node_id, std::move(sink), member);
  had_node_.store(true);  // A node's stream: no longer a store-only run.
  return absl::OkStatus();
}

void Run::Unwatch(const std::string& node_id, const EventSink* sink) {
  Deferred later;
  {
    absl::MutexLock lock(&mu_);
    if (!streams_.Drop(node_id, sink)) {
      // (A stream ended as stale was erased when its node was lost; that
      // loss may have ended the run with no stream left.)
      MaybeKeepOnlyStatusLocked();
      return;
    }
    NoteActivity(absl::Now());  // Idle (IdleNodeless) from its last node's leaving.
    // A replica that does not serve now (paused: its etcd lease unconfirmed)
    // holds its runs still: the agent left to look for a serving leader, it
    // did not die. Nobody is lost; the agent comes back when this replica
    // serves again, or goes to the next leader.
    if (gate_ != nullptr && !gate_->serving()) return;
    // A pending joiner whose agent is gone leaves the round.
    if (std::optional<Joiner> p = pending_.erase(node_id)) {
      later.Answer(std::move(p->done), absl::CancelledError("the joining agent disconnected"));
      // A member that had re-joined the round being re-formed is lost from
      // it, and named (below), as one that had not re-joined yet.
      if (p->was_member && state_ == State::kJoining) reforming_.push_back(std::move(*p->was_member));
    }
    const Member* m = members_.find(node_id);
    if ((state_ == State::kRunning && !(m != nullptr && m->finished)) || state_ == State::kJoining) {
      LoseNodeLocked(node_id, "its agent disconnected", later);
    }
    // A node that watched and left without taking part is forgotten.
    if (!IsParticipantLocked(node_id) && !membership_.IsLost(node_id)) membership_.Forget(node_id);
    MaybeKeepOnlyStatusLocked();
  }
  RunAll(later);  // Its calls are told how the save went.
}

void Run::PushLocked(const RunEvent& event) {
  if (DurabilityLostLocked()) return;
  if (outbox_.holding()) {
    outbox_.Push(streams_.All(), event);
  } else {
    streams_.PushAll(event);
  }
}

void Run::PushToLocked(const std::string& node_id, const RunEvent& event) {
  if (std::shared_ptr<EventSink> s = streams_.FindShared(node_id)) outbox_.Push({std::move(s)}, event);
}

}  // namespace meshrun::rendezvous
