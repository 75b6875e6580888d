#include "rendezvous/run/replica_group_ends.h"

#include <algorithm>

namespace meshrun::rendezvous {

void ReplicaGroupEnds::Merge(const std::string& run_id, std::vector<ReplicaGroupState>& states, absl::Time now) {
  using State = ReplicaGroupState::State;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(run_id);
  if (it == jobs_.end()) {
    if (std::none_of(states.begin(), states.end(), [](const ReplicaGroupState& s) { return s.ended(); })) return;
    if (static_cast<int64_t>(jobs_.size()) >= max_jobs_) {
      jobs_.erase(std::min_element(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) {
        return a.second.merged < b.second.merged;
      }));
    }
    it = jobs_.emplace(run_id, JobEnds{}).first;
  }
  JobEnds& e = it->second;
  e.merged = now;
  if (e.ended.size() < states.size()) e.ended.resize(states.size(), State::kNone);
  for (size_t g = 0; g < states.size(); ++g) {
    ReplicaGroupState& s = states[g];
    if (s.ended()) {
      e.ended[g] = s.state;
      if (s.state == State::kFailed && e.failure_group < 0) {
        e.failure_group = static_cast<int>(g);
        e.failure = s.failure.substr(0, 300);
      }
    } else if (s.state == State::kNone && e.ended[g] != State::kNone) {
      s.state = e.ended[g];  // Its run was removed after it ended.
      if (static_cast<int>(g) == e.failure_group) s.failure = e.failure;
    }
  }
}

int64_t ReplicaGroupEnds::jobs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(jobs_.size());
}

}  // namespace meshrun::rendezvous
