// What a quorum means for one replica group (pure, unit-tested): its place
// among the participants, the highest step, who heals whom, when the
// replicate rows must be built anew; and the text form in which group rank
// 0 hands a quorum (or its error) to the group's other ranks through the
// group's store.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ft/lighthouse_client.h"

namespace meshrun::mesh::ft {

struct QuorumPlan {
  // The participants that take part: those of the quorum's most common
  // world size (on a tie, the first participant's), by index into the
  // quorum, in order. The replicate rows pair rank s of every group, so
  // the groups must be alike; the others are left out of this step.
  std::vector<int> members;
  std::vector<std::string> left_out;  // Replica ids of the others.
  int replica_rank = 0;        // `me`'s index among `members`.
  int replica_world_size = 0;  // members.size().
  int64_t max_step = 0;        // Over `members`.
  // Replica rank of the first member at max_step: what a healing member
  // receives from.
  int heal_source = 0;
  bool anyone_behind = false;  // Some member's step < max_step.
  bool behind = false;         // `me`'s.
  // The members' commit failures, summed: with the quorum id it names the
  // replicate rows. A failed step anywhere raises it, so after a failure
  // the rows are built anew under new store keys even when the quorum's
  // groups did not change.
  int64_t row_epoch = 0;
};

// FAILED_PRECONDITION when `me` is not a participant, or when `me`'s world
// size is not the one taken (naming both): that group cannot take part.
absl::StatusOr<QuorumPlan> PlanQuorum(const Quorum& quorum, const std::string& me);

// The group store's form of a quorum or of the error that replaced it.
// DecodeQuorum returns the encoded error, or INTERNAL for text that is
// neither.
std::string EncodeQuorum(const absl::StatusOr<Quorum>& quorum);
absl::StatusOr<Quorum> DecodeQuorum(const std::string& text);

}  // namespace meshrun::mesh::ft
