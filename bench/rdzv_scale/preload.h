// Store keys written before the failover (issue 30: "10,000 agents <= 10 s
// with 1,000,000 keys loaded"): the next leader must load them from etcd
// before it serves. Written through the leader, as jobs write them, into
// store-only runs beside the measured job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace meshrun::bench {

struct PreloadedKeys {
  std::vector<std::string> run_ids;  // The store-only runs holding them.
  int64_t keys = 0;                  // In all, over run_ids.
  double seconds = 0;                // First write sent to last answered.
};

// Writes `keys` distinct keys of `value_bytes`-byte values to the server at
// `endpoint` (one or more replicas, comma-separated: the client follows the
// leader), in KvMultiSets of 512 keys from 4 clients at once, into
// ceil(keys / keys_per_run) store-only runs "<run_prefix>-<i>" of at most
// `keys_per_run` keys each (under the server's max_keys_per_run). An error
// names the failed write. Bounded: each write by the store's own deadline.
absl::StatusOr<PreloadedKeys> PreloadKeys(const std::string& endpoint, const std::string& run_prefix, int64_t keys,
                                          int64_t keys_per_run, int value_bytes);

// How many keys each of `runs` holds on the server at `endpoint`, summed
// (a store Keys call per run, counting only): what the next leader loaded.
absl::StatusOr<int64_t> CountKeys(const std::string& endpoint, const std::vector<std::string>& runs);

}  // namespace meshrun::bench
