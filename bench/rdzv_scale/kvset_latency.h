// KvSet latency of one store client, one write at a time (issue 24: "a
// store KvSet within 2 ms of the in-memory p50, on the same machine"): what a
// worker setting its NCCL unique id waits for. Measured by the driver on the
// server (the leader, with etcd) while the run's agents are connected and
// heartbeating.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace meshrun::bench {

struct KvSetLatency {
  int count = 0;
  double p50_ms = 0;
  double p99_ms = 0;
};

// `count` KvSets of distinct keys with 32-byte values, one after the other,
// from one client (client/grpc_store.h, as a worker uses it, straight to the
// server at `endpoint`) into the store-only run `run_id`. The first set
// (connection and the run's creation) is not counted. An error names the
// failed set.
absl::StatusOr<KvSetLatency> MeasureKvSet(const std::string& endpoint, const std::string& run_id, int count);

// `count` KvSets sent at once (issue 30: "1,000 concurrent KvSets, one per
// simulated node"), spread over `connections` connections (each warmed up
// by one set first, not counted), distinct keys, 32-byte values: the time
// from the first send to the last answer, and each set's latency. With group
// commit the server saves them in a few etcd transactions. An error names
// the first failed set; bounded by 60 s.
struct ConcurrentKvSets {
  int count = 0;
  double all_ms = 0;  // First send to last answer.
  double p50_ms = 0;
  double max_ms = 0;
};
absl::StatusOr<ConcurrentKvSets> MeasureConcurrentKvSets(const std::string& endpoint, const std::string& run_id,
                                                         int count, int connections);

}  // namespace meshrun::bench
