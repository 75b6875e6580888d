#include "rendezvous/lighthouse/lighthouse.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace meshrun::rendezvous::lighthouse {

Lighthouse::Lighthouse(LighthouseSettings settings, int64_t max_replica_groups, int64_t first_quorum_id,
                       int64_t max_quorum_bytes)
    : settings_(settings),
      max_replica_groups_(max_replica_groups),
      max_quorum_bytes_(max_quorum_bytes),
      quorum_id_(first_quorum_id) {}

namespace {

int64_t MemberBytes(const QuorumMember& m) {
  return static_cast<int64_t>(m.replica_id.size() + m.address.size() + m.store_address.size() + m.data.size()) + 32;
}

}  // namespace

bool Lighthouse::Knows(const std::string& replica_id) const {
  return state_.heartbeats.contains(replica_id) || state_.participants.contains(replica_id);
}

void Lighthouse::ForgetStale(absl::Time now) {
  // A group silent past heartbeat_timeout with no call waiting: it is no
  // candidate (not healthy), and holds no place.
  std::erase_if(state_.heartbeats, [&](const auto& h) {
    return now - h.second >= settings_.heartbeat_timeout && !waits_of_.contains(h.first);
  });
  std::erase_if(state_.participants, [&](const auto& p) {
    return !state_.heartbeats.contains(p.first) && !waits_of_.contains(p.first);
  });
}

absl::StatusOr<uint64_t> Lighthouse::Join(QuorumMember member, absl::Time now, Answer answer) {
  std::vector<std::pair<Answer, Quorum>> answers;
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.ok()) return absl::FailedPreconditionError(closed_.message());
    ForgetStale(now);
    if (!Knows(member.replica_id) && static_cast<int64_t>(state_.heartbeats.size()) >= max_replica_groups_) {
      return absl::ResourceExhaustedError(absl::StrCat("the lighthouse knows ", state_.heartbeats.size(),
                                                       " replica groups already (max_replica_groups); '",
                                                       member.replica_id, "' is one more"));
    }
    if (auto w = waits_of_.find(member.replica_id); w != waits_of_.end() && w->second >= kWaitsPerGroup) {
      return absl::ResourceExhaustedError(absl::StrCat("replica group '", member.replica_id.substr(0, 64), "' has ",
                                                       w->second, " Quorum calls waiting already (at most ",
                                                       kWaitsPerGroup, ")"));
    }
    int64_t bytes = MemberBytes(member);
    for (const auto& [id, p] : state_.participants) {
      if (id != member.replica_id) bytes += MemberBytes(p.member);
    }
    if (bytes > max_quorum_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat("the waiting replica groups' members would take ", bytes,
                                                       " bytes, past max_quorum_bytes (", max_quorum_bytes_, ")"));
    }
    state_.heartbeats[member.replica_id] = now;
    state_.participants[member.replica_id] = Participant{now, member};
    ticket = next_ticket_++;
    ++waits_of_[member.replica_id];
    waiters_.emplace(ticket, Waiter{std::move(member), std::move(answer)});
    answers = TickLocked(now);
  }
  for (auto& [a, q] : answers) a(std::move(q));
  return ticket;
}

void Lighthouse::Unwait(const std::string& replica_id) {
  auto w = waits_of_.find(replica_id);
  if (w != waits_of_.end() && --w->second <= 0) waits_of_.erase(w);
}

bool Lighthouse::Cancel(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  auto it = waiters_.find(ticket);
  if (it == waiters_.end()) return false;
  const std::string replica_id = it->second.member.replica_id;
  Unwait(replica_id);
  waiters_.erase(it);
  // Its last call gone (its process died, or gave up): no longer a
  // candidate, so that a dead group is not put in the next quorum while
  // its heartbeat is still fresh. It stays healthy until then.
  if (!waits_of_.contains(replica_id)) state_.participants.erase(replica_id);
  return true;
}

absl::Status Lighthouse::Heartbeat(const std::string& replica_id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (!closed_.ok()) return absl::FailedPreconditionError(closed_.message());
  ForgetStale(now);
  if (!Knows(replica_id) && static_cast<int64_t>(state_.heartbeats.size()) >= max_replica_groups_) {
    return absl::ResourceExhaustedError(absl::StrCat("the lighthouse knows ", state_.heartbeats.size(),
                                                     " replica groups already (max_replica_groups); '", replica_id,
                                                     "' is one more"));
  }
  state_.heartbeats[replica_id] = now;
  return absl::OkStatus();
}

void Lighthouse::Tick(absl::Time now) {
  std::vector<std::pair<Answer, Quorum>> answers;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.ok()) return;
    ForgetStale(now);
    answers = TickLocked(now);
  }
  for (auto& [a, q] : answers) a(std::move(q));
}

std::vector<std::pair<Lighthouse::Answer, Quorum>> Lighthouse::TickLocked(absl::Time now) {
  QuorumDecision d = ComputeQuorum(now, state_, settings_);
  last_reason_ = d.reason;
  std::vector<std::pair<Answer, Quorum>> answers;
  if (!d.participants.has_value()) return answers;
  if (!state_.previous.has_value() || MembershipChanged(*d.participants, state_.previous->participants)) ++quorum_id_;
  Quorum q{quorum_id_, std::move(*d.participants), now};
  state_.previous = q;
  state_.participants.clear();
  std::set<std::string> in;
  for (const QuorumMember& m : q.participants) in.insert(m.replica_id);
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (in.contains(it->second.member.replica_id)) {
      answers.emplace_back(std::move(it->second.answer), q);
      Unwait(it->second.member.replica_id);
      it = waiters_.erase(it);
    } else {
      // Left out: it waits for the next quorum, from now (torchft's loop).
      state_.participants[it->second.member.replica_id] = Participant{now, it->second.member};
      ++it;
    }
  }
  return answers;
}

void Lighthouse::Close(const absl::Status& why) {
  std::map<uint64_t, Waiter> waiters;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.ok()) return;
    closed_ = why.ok() ? absl::UnavailableError("the lighthouse closed") : why;
    waiters.swap(waiters_);
    waits_of_.clear();
  }
  for (auto& [ticket, w] : waiters) w.answer(absl::UnavailableError(why.message()));
}

int64_t Lighthouse::quorum_id() const {
  absl::MutexLock lock(&mu_);
  return quorum_id_;
}

Lighthouse::View Lighthouse::view() const {
  absl::MutexLock lock(&mu_);
  View v;
  v.quorum_id = quorum_id_;
  v.quorum_members = state_.previous.has_value() ? static_cast<int64_t>(state_.previous->participants.size()) : 0;
  v.waiting = static_cast<int64_t>(waiters_.size());
  v.replica_groups = static_cast<int64_t>(state_.heartbeats.size());
  v.reason = last_reason_;
  if (state_.previous.has_value()) {
    v.member_steps.reserve(state_.previous->participants.size());
    for (const QuorumMember& m : state_.previous->participants) v.member_steps.emplace_back(m.replica_id, m.step);
  }
  return v;
}

int64_t Lighthouse::waiting() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(waiters_.size());
}

std::string Lighthouse::last_reason() const {
  absl::MutexLock lock(&mu_);
  return last_reason_;
}

}  // namespace meshrun::rendezvous::lighthouse
