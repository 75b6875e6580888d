// The server side of a node's store proxy: the agent's one connection to
// the rendezvous server, carrying the proxy's batches (KvBatch, for
// StoreBatcher) and the worker calls it forwards as they are, each with
// the agent's token and node id ("meshrun-node" metadata). Counts calls in
// flight so the proxy can bound them and wait for them at exit.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/kept_calls.h"
#include "agent/store_proxy/store_batcher.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"

namespace meshrun::agent {

class KvBatchCall;

class GrpcUpstream : public BatchUpstream {
 public:
  using Stub = v1::Store::Stub;

  // Forwards for run `run_id` with `token` (the agent's; workers never see
  // it). No channel yet: SetChannel before the first call. `kept_retry`:
  // how long a request kept for the next leader waits for one before it is
  // sent again on the current connection (agent/kept_calls.h).
  GrpcUpstream(std::string run_id, std::string token, absl::Duration kept_retry = absl::Seconds(1));
  // Frees the stub. Its owner (the store proxy) first stops its own gRPC
  // server and waits for the calls in flight (Drain), so none outlives it.
  ~GrpcUpstream() override;

  // The channel and node id for calls from now on (calls in flight finish
  // on the old channel). Requests kept for the next leader (below) are sent
  // on it again. Thread-safe.
  void SetChannel(std::shared_ptr<grpc::Channel> channel, std::string node_id);
  // Replicas (the agent follows the leader): a batch whose server went away
  // (UNAVAILABLE) keeps its unanswered requests until SetChannel names the
  // next leader (at once when it named one since the batch went out), or
  // kept_retry passes (then on the current connection), each with the wait
  // it had left; the worker's own deadline or cancel, or Drain, answers
  // one kept meanwhile. Off (default): they get the error at once.
  // Thread-safe.
  void SetFollowLeader(bool follow);

  // Replicas: keeps a forwarded call whose server went away until
  // SetChannel names the next leader or kept_retry passes, then calls
  // `resend(true)` (the caller sends it again on the current connection);
  // Drain calls `resend(false)` (the caller answers it). `sent_on`: the
  // stub the call went out on; when SetChannel has named another since,
  // `resend(true)` runs at once. False, keeping
  // nothing, when not following a leader or stopping: the caller answers
  // at once. Thread-safe; `resend` runs without the upstream's lock.
  bool KeepCall(const Stub* sent_on, absl::AnyInvocable<void(bool resend)> resend);

  // A context for one forwarded call: the node id, and `deadline` (a
  // worker's own deadline passes through; max() for none). Counts the call
  // in flight until CallEnded. Thread-safe.
  std::shared_ptr<grpc::ClientContext> NewContext(std::chrono::system_clock::time_point deadline,
                                                  std::shared_ptr<Stub>* stub);
  // The same for a call of the server's Admin service (a worker's Status).
  std::shared_ptr<grpc::ClientContext> NewContext(std::chrono::system_clock::time_point deadline,
                                                  std::shared_ptr<v1::Admin::Stub>* admin);
  // A call made with NewContext ended (once per NewContext). Thread-safe.
  void CallEnded();
  // Calls to the server now: in flight (batches and forwarded calls) and
  // kept for the next leader (KeepCall's calls, KeepForNextLeader's
  // batches), which still hold their workers' calls: what the proxy's
  // bound on forwarded calls (store_proxy_max_waiters) counts.
  int64_t in_flight();
  // The run id and token of every request.
  void FillRun(v1::RunRef* run) const;

  // BatchUpstream: one KvBatch call per batch; its deadline is the
  // longest wait of its items plus 30 s for the round trip.
  void StartBatch(std::vector<BatchItem> items, absl::AnyInvocable<void()> accepted) override;
  void Cancel(StoreUpstream::Id id) override;

  // Cancels every batch in flight and waits until no call is in flight, or
  // `timeout` passes; true when none is.
  bool Drain(absl::Duration timeout);

 private:
  friend class KvBatchCall;
  // A batch call ended: forgets its items.
  void BatchEnded(const std::vector<StoreUpstream::Id>& ids, KvBatchCall* call);
  // A batch call's server went away: keeps `items` (those of `call` still
  // listed) for the next leader when following one; returns the rest,
  // which the caller answers.
  std::vector<BatchItem> KeepForNextLeader(std::vector<BatchItem> items, KvBatchCall* call);
  // Kept items `ids` still kept: sent again now, on the current connection.
  void ResendKept(const std::vector<StoreUpstream::Id>& ids);

  const std::string run_id_;
  const std::string token_;
  absl::Mutex mu_;
  std::shared_ptr<Stub> stub_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<v1::Admin::Stub> admin_stub_ ABSL_GUARDED_BY(mu_);
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  // Item -> the batch call it is in (alive while listed; null: kept for the
  // next leader, in kept_).
  absl::flat_hash_map<StoreUpstream::Id, KvBatchCall*> items_ ABSL_GUARDED_BY(mu_);
  struct KeptItem {
    BatchItem item;
    absl::Time since;  // Its wait is sent again less the time kept.
  };
  absl::flat_hash_map<StoreUpstream::Id, KeptItem> kept_ ABSL_GUARDED_BY(mu_);
  bool follow_leader_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // Drain was called.
  // Batch calls in flight (cancelled when the upstream stops).
  absl::flat_hash_set<KvBatchCall*> calls_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // KeepCall's calls and KeepForNextLeader's retry timers. Last: destroyed
  // (its timer stopped) first.
  std::unique_ptr<KeptCalls> kept_calls_;
};

}  // namespace meshrun::agent
