// The quorum rule of torchft's lighthouse (torchft 0.2.0, torchft/src/
// lighthouse.rs), as a pure function over the lighthouse's state: which
// replica groups form the next quorum, or why none does yet. Free of gRPC
// and of clocks: the caller passes `now`.
//
// The rule, in torchft's order (the reasons name the counts as torchft's do):
//   1. healthy groups: those whose last heartbeat (a Quorum call counts as
//      one) is younger than heartbeat_timeout;
//   2. candidates: the healthy groups waiting in a Quorum call, sorted by
//      replica id;
//   3. when a previous quorum exists: if any candidate asks shrink_only,
//      only the previous quorum's members stay candidates; and when every
//      member of the previous quorum is a candidate, the candidates are the
//      quorum at once (the fast quorum: no minimum, no join timeout);
//   4. none while fewer than min_replicas candidates;
//   5. none unless the candidates are more than half of the healthy groups
//      (no split brain between two halves);
//   6. none until every healthy group waits, or join_timeout has passed
//      since the earliest candidate's call arrived;
//   7. else the candidates.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace meshrun::rendezvous::lighthouse {

// One replica group's request, as torchft's QuorumMember carries it (the
// same fields; `data` is the user's JSON text, passed through).
struct QuorumMember {
  std::string replica_id;
  std::string address;        // Its torchft ManagerServer's address.
  std::string store_address;  // Its TCPStore, host:port.
  int64_t step = 0;
  uint64_t world_size = 0;
  bool shrink_only = false;
  int64_t commit_failures = 0;
  std::string data;
};

struct Quorum {
  int64_t quorum_id = 0;
  std::vector<QuorumMember> participants;  // Sorted by replica_id.
  absl::Time created;
};

// torchft_lighthouse's settings, with its defaults (--min_replicas has
// none in torchft; 1 here).
struct LighthouseSettings {
  int64_t min_replicas = 1;
  absl::Duration join_timeout = absl::Seconds(60);
  absl::Duration quorum_tick = absl::Milliseconds(100);
  absl::Duration heartbeat_timeout = absl::Seconds(5);
};

struct Participant {
  absl::Time joined;  // When its Quorum call arrived.
  QuorumMember member;
};

struct QuorumState {
  std::map<std::string, Participant> participants;  // By replica id: those waiting.
  std::map<std::string, absl::Time> heartbeats;     // Last heartbeat, by replica id.
  std::optional<Quorum> previous;
};

struct QuorumDecision {
  std::optional<std::vector<QuorumMember>> participants;  // Set: a quorum is met.
  std::string reason;  // Why (met or not), one line.
};

// Steps 1-6 above. Pure function.
QuorumDecision ComputeQuorum(absl::Time now, const QuorumState& state, const LighthouseSettings& settings);

// Whether `next` has other members than `previous` (by replica id): the
// quorum id is incremented then, as torchft does.
bool MembershipChanged(const std::vector<QuorumMember>& next, const std::vector<QuorumMember>& previous);

}  // namespace meshrun::rendezvous::lighthouse
