#include "rendezvous/lighthouse/quorum.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace meshrun::rendezvous::lighthouse {

QuorumDecision ComputeQuorum(absl::Time now, const QuorumState& state, const LighthouseSettings& settings) {
  std::set<std::string> healthy;
  for (const auto& [id, last] : state.heartbeats) {
    if (now - last < settings.heartbeat_timeout) healthy.insert(id);
  }
  // std::map: the candidates come out sorted by replica id.
  std::vector<const Participant*> waiting;
  bool shrink_only = false;
  for (const auto& [id, p] : state.participants) {
    if (!healthy.contains(id)) continue;
    waiting.push_back(&p);
    shrink_only = shrink_only || p.member.shrink_only;
  }
  std::vector<QuorumMember> candidates;
  for (const Participant* p : waiting) candidates.push_back(p->member);
  const std::string counts = absl::StrCat("[", waiting.size(), "/", state.participants.size(),
                                          " participants healthy][", healthy.size(),
                                          " heartbeating][shrink_only=", shrink_only ? "true" : "false", "]");
  if (state.previous.has_value()) {
    std::set<std::string> previous;
    for (const QuorumMember& m : state.previous->participants) previous.insert(m.replica_id);
    if (shrink_only) {
      std::erase_if(candidates, [&](const QuorumMember& m) { return !previous.contains(m.replica_id); });
    }
    const bool fast = std::all_of(previous.begin(), previous.end(), [&](const std::string& id) {
      return healthy.contains(id) && state.participants.contains(id);
    });
    if (fast) return {std::move(candidates), absl::StrCat("fast quorum: every previous member is back ", counts)};
  }
  const int64_t n = static_cast<int64_t>(waiting.size());
  if (n < settings.min_replicas) {
    return {std::nullopt, absl::StrCat("no quorum yet: ", n, " participants, min_replicas is ", settings.min_replicas,
                                       " ", counts)};
  }
  if (n <= static_cast<int64_t>(healthy.size()) / 2) {
    return {std::nullopt, absl::StrCat("no quorum yet: ", n, " participants, need more than half of ", healthy.size(),
                                       " healthy replica groups ", counts)};
  }
  if (n < static_cast<int64_t>(healthy.size())) {
    absl::Time first = now;
    for (const Participant* p : waiting) first = std::min(first, p->joined);
    if (now - first < settings.join_timeout) {
      return {std::nullopt, absl::StrCat("a valid quorum of ", n, " waits for ", healthy.size() - n,
                                         " healthy stragglers until join_timeout ", counts)};
    }
  }
  return {std::move(candidates), absl::StrCat("quorum met ", counts)};
}

bool MembershipChanged(const std::vector<QuorumMember>& next, const std::vector<QuorumMember>& previous) {
  if (next.size() != previous.size()) return true;
  for (size_t i = 0; i < next.size(); ++i) {
    if (next[i].replica_id != previous[i].replica_id) return true;
  }
  return false;
}

}  // namespace meshrun::rendezvous::lighthouse
