// etcd's own latency for one write at a time, measured beside the leading
// replica's KvSet (kvset_latency.h) on the same etcd members: the floor of
// any store write that is saved before it is answered. It splits the
// leader's KvSet p50 into etcd's part and meshrun's (issue 30: "KvSet p50
// on the leading replica within 1 ms of the in-memory p50").
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace meshrun::bench {

struct EtcdWriteLatency {
  int count = 0;
  double put_p50_ms = 0;     // A plain Put of one key.
  double put_p99_ms = 0;
  double fenced_p50_ms = 0;  // Election::FencedTxn of one Put: a replica's store write as the writer sends it alone.
  double fenced_p99_ms = 0;
};

// `count` Puts, then `count` FencedTxns of one Put each, of distinct keys
// with 32-byte values, one after the other, from one etcd client to the
// members of `etcd_url` (etcd://HOST:PORT,...; the first is asked first, as
// a replica asks its own host's member). The fenced writes lead an election
// of their own under `prefix` (no replica's), with a 2 s lease, as a
// replica does; every key written is under `prefix` and is deleted at the
// end. The first of each kind (connection, lease) is not counted.
// INVALID_ARGUMENT for count < 1; otherwise the failed call's error.
absl::StatusOr<EtcdWriteLatency> MeasureEtcdWrites(const std::string& etcd_url, const std::string& prefix, int count);

}  // namespace meshrun::bench
