// Run: closing a round (at MAX at once, or after the last call once MIN
// joined, or when every survivor of a re-form is back): node order,
// addresses and every node's assignment.
#include "rendezvous/run/run.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rendezvous/run/round_forming.h"

namespace meshrun::rendezvous {

void Run::MaybeCloseLocked(Deferred& later) {
  if (state_ != State::kJoining) return;
  const int joined = static_cast<int>(pending_.size());
  if (joined >= config_.max_nodes || (reform_target_ > 0 && joined >= reform_target_ &&
                                      joined >= config_.min_nodes)) {
    CloseRoundLocked(later);
    return;
  }
  if (joined >= config_.min_nodes && !last_call_armed_) {
    last_call_armed_ = true;
    std::weak_ptr<Run> weak = weak_from_this();
    int64_t round = round_;
    last_call_timer_ = timer_->Schedule(absl::Now() + config_.last_call_timeout, [weak, round] {
      if (auto self = weak.lock()) self->OnLastCall(round);
    });
  }
}

void Run::OnLastCall(int64_t round) {
  Deferred later;
  {
    absl::MutexLock lock(&mu_);
    if (round != round_ || state_ != State::kJoining) return;
    last_call_armed_ = false;
    if (static_cast<int>(pending_.size()) >= config_.min_nodes) {
      CloseRoundLocked(later);
    }
  }
  RunAll(later);  // Its calls are told how the save went.
}

void Run::CloseRoundLocked(Deferred& later) {
  if (last_call_armed_) {
    timer_->Cancel(last_call_timer_);
    last_call_armed_ = false;
  }
  const int take = std::min<int>(static_cast<int>(pending_.size()), config_.max_nodes);
  std::vector<Joiner> joining = pending_.take_front(static_cast<size_t>(take));

  std::vector<NodeDesc> descs;
  descs.reserve(joining.size());
  for (const auto& j : joining) descs.push_back(j.node);
  absl::StatusOr<FormedRound> formed =
      FormRound(descs, round_, restarts_.spent(), config_.max_restarts, limits_.max_world_size, run_id_);
  if (!formed.ok()) {
    // No usable address for some node, or too many processes: nobody can
    // run this round.
    const absl::Status s = formed.status();
    Logger("rdzv")->error("run '{}' round {}: {}", run_id_, round_, std::string(s.message()));
    for (auto& j : joining) {
      // Refused: a node known only from this join (its event stream not
      // open yet: the agent sends both at once, in either order) is
      // forgotten, so that its stream, when it comes, opens as a new node's
      // rather than being refused for a credential it never received; its
      // agent then reports this answer, the cause.
      const std::string& id = j.node.node_id;
      if (!streams_.Has(id) && !members_.contains(id) && !reforming_.contains(id)) membership_.Forget(id);
      later.Answer(std::move(j.done), s);
    }
    return;
  }
  if (!formed->warning.empty()) Logger("rdzv")->warn("run '{}': {}", run_id_, formed->warning);
  members_.clear();
  reforming_.clear();
  finished_count_ = 0;
  std::vector<std::string> ids;
  ids.reserve(formed->order.size());
  for (int index : formed->order) ids.push_back(descs[index].node_id);
  // New credentials; the replaced ones stay good for heartbeats in flight.
  std::vector<std::string> sessions =
      membership_.RenewCredentials(ids, absl::Now() + 2 * config_.keep_alive_interval);
  for (size_t r = 0; r < formed->order.size(); ++r) {
    Joiner& j = joining[formed->order[r]];
    j.node.addr = descs[formed->order[r]].addr;
    Assignment& a = formed->assignments[r];
    // The member keeps no copy of its credential (the membership has it).
    members_.push_back(Member{j.node, a});
    a.session = std::move(sessions[r]);
    later.Answer(std::move(j.done), std::move(a));
  }
  const int world = formed->world_size;
  state_ = State::kRunning;
  // Its store serves members from now on (the members' reserve): only once
  // a round closed, never for a join that waits (anyone with the token can
  // send one).
  kv_->MarkMemberRun();
  reform_target_ = 0;
  last_progress_joined_ = -1;
  const absl::Time now = absl::Now();
  for (const auto& m : members_) membership_.Touch(m.node.node_id, now);
  membership_.Compact();
  ArmLivenessLocked();
  kv_->DropRoundsBelow(round_);
  NoteLocked("round", absl::StrCat("round ", round_, " closed: ", members_.size(), " node(s), world size ", world));
  // One durable write per closed round, before any join is answered and
  // before its ROUND_CLOSED goes out.
  JournalLocked(later);
  PushLocked(RoundClosedLocked());
  Logger("rdzv")->info("run '{}' round {} closed: {} nodes, world size {}", run_id_, round_,
                       members_.size(), world);
}

}  // namespace meshrun::rendezvous
