// A client of torchft's LighthouseService (Quorum, Heartbeat:
// proto/torchft.proto), what libmesh's fault-tolerance manager asks for its
// quorums: meshrun's lighthouse through the node's agent
// (TORCHFT_LIGHTHOUSE), or torchft's own torchft_lighthouse. The gRPC
// types stay in the .cc file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace meshrun::mesh::ft {

// One replica group as the lighthouse sees it (torchft's QuorumMember,
// the fields libmesh uses).
struct Member {
  std::string replica_id;
  int64_t step = 0;
  int64_t world_size = 0;
  // Steps the group failed to commit (torchft's commit_failures): a
  // change makes the quorum's groups build their replicate rows anew
  // (quorum_plan.h's row_epoch).
  int64_t commit_failures = 0;
};

struct Quorum {
  int64_t quorum_id = 0;
  std::vector<Member> participants;  // As the lighthouse sorts them (by replica id).
};

class LighthouseClient {
 public:
  // `address`: "http://host:port" or "host:port". INVALID_ARGUMENT for an
  // empty one. Connects lazily.
  static absl::StatusOr<std::unique_ptr<LighthouseClient>> Create(const std::string& address);
  virtual ~LighthouseClient() = default;

  // Asks for the next quorum that includes `me`, waiting up to `timeout`.
  // A call failing UNAVAILABLE (the server's leader changed, the agent's
  // upstream moving) is asked again, every 100 ms, within `timeout`.
  // DEADLINE_EXCEEDED naming the lighthouse when no quorum came; other
  // errors as the lighthouse gave them. Thread-safe.
  virtual absl::StatusOr<Quorum> AskQuorum(const Member& me, absl::Duration timeout) = 0;
  // Tells the lighthouse `replica_id` is alive. Thread-safe.
  virtual absl::Status Heartbeat(const std::string& replica_id, absl::Duration timeout) = 0;
};

}  // namespace meshrun::mesh::ft
