// What a quorum means for one replica group (pure, unit-tested): its place
// among the participants, the highest step, who heals whom; and the text
// form in which group rank 0 hands a quorum (or its error) to the group's
// other ranks through the group's store.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "ft/lighthouse_client.h"

namespace meshrun::mesh::ft {

struct QuorumPlan {
  int replica_rank = 0;        // `me`'s index among the participants.
  int replica_world_size = 0;  // Participants.
  int64_t max_step = 0;
  // Replica rank of the first participant at max_step: what a healing
  // participant receives from.
  int heal_source = 0;
  bool anyone_behind = false;  // Some participant's step < max_step.
  bool behind = false;         // `me`'s.
};

// FAILED_PRECONDITION when `me` is not a participant, or when a
// participant's world size differs from `world_size` (naming it): the
// replicate rows pair rank s of every group, so the groups must be alike.
absl::StatusOr<QuorumPlan> PlanQuorum(const Quorum& quorum, const std::string& me, int64_t world_size);

// The group store's form of a quorum or of the error that replaced it.
// DecodeQuorum returns the encoded error, or INTERNAL for text that is
// neither.
std::string EncodeQuorum(const absl::StatusOr<Quorum>& quorum);
absl::StatusOr<Quorum> DecodeQuorum(const std::string& text);

}  // namespace meshrun::mesh::ft
