// The replicas as `meshrun status` shows them (ServingGate::Replicas), read
// from etcd's election keys, without making every Status call wait for etcd
// while etcd does not answer (no quorum, or this host cut off from it).
// While reads work, each call reads the list on its own thread, within
// `quick_timeout` (a linearizable read: never a stale list). Once a read
// fails, calls get an empty list ("unknown") at once, while one read at a
// time (with the client's own timeouts and fail-over between members) goes
// on in the background; the first one that works ends that. No gRPC, no etcd
// types: `read` is the etcd read. Thread-safe.
#pragma once

#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rendezvous/state/serving_gate.h"

namespace meshrun::rendezvous::state::etcd {

class ReplicaList {
 public:
  // Reads every replica, the leader first, within `timeout` (zero: the
  // client's own timeouts). Blocking.
  using Read = std::function<absl::StatusOr<std::vector<ReplicaView>>(absl::Duration timeout)>;

  explicit ReplicaList(Read read, absl::Duration quick_timeout = absl::Seconds(1));
  // Waits for a background read in flight.
  ~ReplicaList();
  ReplicaList(const ReplicaList&) = delete;
  ReplicaList& operator=(const ReplicaList&) = delete;

  // The replicas (see above); empty when unknown.
  std::vector<ReplicaView> Get();
  // etcd is known not to answer now (this replica's lease went unconfirmed):
  // from now on calls get the empty list at once, as after a failed read,
  // until a background read works; the first Status call during a quorum
  // loss then waits for nothing.
  void MarkFailing();
  // etcd answered this replica again (its lease confirmed, or its loss
  // learned from etcd): calls read the list themselves again, without
  // waiting for the background read still in flight to time out.
  void MarkAnswering();

 private:
  void Refresher();

  const Read read_;
  const absl::Duration quick_timeout_;
  absl::Mutex mu_;
  bool failing_ ABSL_GUARDED_BY(mu_) = false;  // The last read failed.
  bool refresh_ ABSL_GUARDED_BY(mu_) = false;  // The background read is asked for.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace meshrun::rendezvous::state::etcd
