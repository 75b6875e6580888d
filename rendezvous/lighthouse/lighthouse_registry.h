// The rendezvous server's lighthouses, one per run id (lighthouse.h), and
// the thread that ticks each every its quorum_tick. A run's lighthouse is
// made by its first call, with that call's settings, and dropped when the
// run is gone from the server and no call waits on it (its quorum ids raise
// the floor, below).
//
// Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rendezvous/lighthouse/lighthouse.h"

namespace meshrun::rendezvous::lighthouse {

struct RegistryOptions {
  int64_t max_lighthouses = 1024;      // Runs with a lighthouse at once.
  int64_t max_replica_groups = 4096;   // Per lighthouse (lighthouse.h).
  int64_t max_quorum_bytes = Lighthouse::kDefaultMaxQuorumBytes;  // Per lighthouse (lighthouse.h).
  // Whether a run id names a run the server has: a lighthouse is made only
  // for one, and dropped once it has none. Always true when unset.
  std::function<bool(const std::string&)> run_exists;
};

class LighthouseRegistry {
 public:
  explicit LighthouseRegistry(RegistryOptions options);
  // Closes every lighthouse (their waiting calls get UNAVAILABLE) and
  // stops the ticks.
  ~LighthouseRegistry();

  // The lighthouse of `run_id`, made with `settings` when it has none:
  // NOT_FOUND when the server has no such run, RESOURCE_EXHAUSTED past
  // max_lighthouses, FAILED_PRECONDITION after CloseAll.
  absl::StatusOr<std::shared_ptr<Lighthouse>> Get(const std::string& run_id, const LighthouseSettings& settings);
  // Closes every lighthouse with `why` and forgets them: this replica
  // stopped leading (the next leader's lighthouses answer). Their quorum
  // ids raise the floor (below).
  void CloseAll(const absl::Status& why);
  // Lighthouses made from now on number their quorums above `floor` (and
  // above every id a closed one gave): quorum ids never go back, across a
  // reload or, with a floor from the leader's election revision, a
  // failover (server_cmd.cc: revision x 2^24; a term would have to change
  // its groups 2^24 times to reach the next term's ids).
  void RaiseQuorumIdFloor(int64_t floor);
  int64_t size();
  // The lighthouse of `run_id` (every run's when empty), by run id.
  std::vector<std::pair<std::string, Lighthouse::View>> Views(const std::string& run_id);

 private:
  void TickLoop();

  const RegistryOptions options_;
  absl::Mutex mu_;
  struct Entry {
    std::shared_ptr<Lighthouse> lighthouse;
    absl::Time next_tick;
  };
  absl::flat_hash_map<std::string, Entry> lighthouses_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t quorum_id_floor_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread ticker_;
};

}  // namespace meshrun::rendezvous::lighthouse
