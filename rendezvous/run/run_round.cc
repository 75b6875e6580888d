// Run: closing a round (at MAX at once, or after the last call once MIN
// joined, or when every survivor of a re-form is back): node order,
// addresses and every node's assignment.
#include "rendezvous/run/run.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rendezvous/run/advertised_address.h"
#include "rendezvous/run/credential.h"
#include "rendezvous/run/node_order.h"

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
  RunAll(later);
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
  int64_t world64 = 0;
  for (const auto& d : descs) world64 += d.nproc;  // Each nproc <= max_nproc: no overflow.
  absl::Status shape = world64 > limits_.max_world_size
                           ? absl::InvalidArgumentError(absl::StrCat(
                                 "round ", round_, " of run '", run_id_.substr(0, 64), "' would have world size ",
                                 world64, ": allowed: 1..", limits_.max_world_size, " (max_world_size)"))
                           : DecideAddresses(descs);
  if (absl::Status s = shape; !s.ok()) {
    // No usable address for some node: nobody can run this round.
    Logger("rdzv")->error("run '{}' round {}: {}", run_id_, round_, std::string(s.message()));
    for (auto& j : joining) {
      // Refused: a node known only from this join (its event stream not
      // open yet: the agent sends both at once, in either order) is
      // forgotten, so that its stream, when it comes, opens as a new node's
      // rather than being refused for a credential it never received; its
      // agent then reports this answer, the cause.
      const std::string& id = j.node.node_id;
      if (!watchers_.contains(id) && !members_.contains(id) && !reforming_.contains(id)) known_.erase(id);
      later.push_back([cb = std::move(j.done), s]() mutable { cb(s); });
    }
    SyncNodeChargeLocked();
    return;
  }
  for (size_t i = 0; i < joining.size(); ++i) joining[i].node.addr = descs[i].addr;
  NodeOrder order = OrderNodes(descs);
  if (!order.warning.empty()) Logger("rdzv")->warn("run '{}': {}", run_id_, order.warning);

  int world = 0;
  absl::flat_hash_map<std::string, int> role_size;
  for (const auto& d : descs) {
    world += d.nproc;
    role_size[d.role] += d.nproc;
  }
  const NodeDesc& first = descs[order.order[0]];
  members_.clear();
  reforming_.clear();
  finished_count_ = 0;
  int base = 0;
  absl::flat_hash_map<std::string, int> role_base;
  // The credentials replaced below, still good for heartbeats in flight.
  absl::flat_hash_map<std::string, std::string> previous;
  previous.reserve(order.order.size());
  for (int r = 0; r < static_cast<int>(order.order.size()); ++r) {
    Joiner& j = joining[order.order[r]];
    Assignment a;
    a.round = round_;
    a.node_rank = r;
    a.node_count = static_cast<int>(joining.size());
    a.rank_base = base;
    a.world_size = world;
    a.master_addr = first.addr;
    a.node_addr = j.node.addr;
    a.master_port = first.master_port;
    a.restart_count = restarts_.spent();
    a.max_restarts = config_.max_restarts;
    a.role_rank_base = role_base[j.node.role];
    a.role_world_size = role_size[j.node.role];
    role_base[j.node.role] += j.node.nproc;
    base += j.node.nproc;
    // The member keeps no copy of its credential (known_ has it).
    members_.push_back(Member{j.node, a});
    Known& k = known_[j.node.node_id];
    previous[j.node.node_id] = std::move(k.session);
    a.session = k.session = NewCredential();
    later.push_back([cb = std::move(j.done), a]() mutable { cb(a); });
  }
  previous_sessions_ = std::move(previous);
  previous_sessions_until_ = absl::Now() + 2 * config_.keep_alive_interval;
  state_ = State::kRunning;
  reform_target_ = 0;
  last_progress_joined_ = -1;
  const absl::Time now = absl::Now();
  for (const auto& m : members_) known_[m.node.node_id].last_seen = now;
  CompactNodeMapsLocked();
  ArmLivenessLocked();
  kv_->DropRoundsBelow(round_);
  PushLocked(RoundClosedLocked());
  Logger("rdzv")->info("run '{}' round {} closed: {} nodes, world size {}", run_id_, round_,
                       members_.size(), world);
  // One durable write per closed round, before any join is answered.
  JournalLocked(later);
}

}  // namespace meshrun::rendezvous
