// Internal to rendezvous/state/etcd: the Client's members, channels and the
// one loop that sends a call with fail-over (etcd_client.h describes the
// behaviour). The watcher and the lease keeper use it too.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "rendezvous/state/etcd/client/etcd_client.h"

namespace meshrun::rendezvous::state::etcd {

// One etcd member: its channel and stubs. Immutable after Create.
struct Member {
  Endpoint endpoint;
  std::string name;  // host:port
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<::etcdserverpb::KV::Stub> kv;
  std::unique_ptr<::etcdserverpb::Watch::Stub> watch;
  std::unique_ptr<::etcdserverpb::Lease::Stub> lease;
  std::unique_ptr<::etcdserverpb::Cluster::Stub> cluster;
  std::unique_ptr<::etcdserverpb::Maintenance::Stub> maintenance;
  std::unique_ptr<::etcdserverpb::Auth::Stub> auth;
};

// What a call is, for its retries and its messages.
struct CallSpec {
  std::string what;          // "Put /meshrun/x", for messages.
  bool write = false;        // Not retried once sent (etcd may have applied it).
  absl::Duration timeout;    // The whole call; zero: options.call_timeout.
  size_t request_bytes = 0;  // For the request-size message.
  size_t txn_ops = 0;        // For the too-many-ops message.
  bool require_leader = true;  // etcd's "hasleader" (false: serializable reads).
  // On failure, probe the members to name the cause (up to probe_timeout
  // more); false: the error names what the call itself saw, and the call
  // ends by its deadline (the lease keeper's renewals).
  bool diagnose = true;
  // One try on one member; zero: options.attempt_timeout.
  absl::Duration attempt_timeout = absl::ZeroDuration();
};

// How one member fared in a call, for the error message.
struct MemberOutcome {
  enum class Kind { kUntried, kNotConnected, kFailed };
  Kind kind = Kind::kUntried;
  std::string cause;  // kFailed: what it answered.
};

// Sends the request on one member: fills the response, returns gRPC's status.
using Invoke = std::function<grpc::Status(Member& m, grpc::ClientContext* ctx)>;

struct Client::Impl {
  ClientOptions options;
  std::vector<std::unique_ptr<Member>> members;

  struct State {
    int current = 0;     // Index of the member calls go to first.
    std::string token;   // etcd's auth token; empty: none yet.
  };
  mutable absl::Mutex mu;
  State state ABSL_GUARDED_BY(mu);

  // Runs `invoke` on the current member, failing over as etcd_client.h
  // says; OK, or the one-line error. `member_out`, when set, gets the index
  // of the member that answered.
  // Tells options.on_call how it ended.
  absl::Status Call(const CallSpec& spec, const Invoke& invoke, int* member_out = nullptr);
  // Call's work, without telling.
  absl::Status CallMembers(const CallSpec& spec, const Invoke& invoke, int* member_out);

  // The index of `member` among members; -1 when it is not one of them.
  int IndexOf(const Endpoint& member) const;
  // Waits until member `i`'s channel is connected, at most until `deadline`.
  // In `round` 0 a member whose last connection attempt failed is skipped at
  // once; later it is tried again when it accepts TCP.
  bool Ready(int i, absl::Time deadline, int round);
  // The first member from `start` on (in order, wrapping) that is connected
  // by `deadline` (several rounds), with its index; the one-line error of
  // Unreachable otherwise.
  absl::StatusOr<int> PickReady(int start, absl::Time deadline);

  // The auth token (authenticating on `m` when none is held); "" without a
  // user. `failure` gets the gRPC status of a failed Authenticate.
  absl::StatusOr<std::string> Token(Member& m, absl::Time deadline, grpc::Status* failure);
  void DropToken(const std::string& token);

  // Prepares a context: deadline, "hasleader", the token.
  void Prepare(grpc::ClientContext* ctx, absl::Time deadline, const std::string& token,
               bool require_leader = true) const;

  // Why member `i` cannot be reached (TCP, then TLS), one phrase, probed
  // within options.probe_timeout; "" when both answer fine.
  std::string ProbeCause(int i);
  // The one-line error of a call that found no member able to answer:
  // probes the members that did not connect (ProbeCause) and asks the others
  // for their Status (is there a leader?), in parallel, within probe_timeout.
  // FAILED_PRECONDITION for a TLS mismatch, UNAVAILABLE "etcd unreachable"
  // when no member connected, UNAVAILABLE "etcd has no leader (quorum lost
  // ...)" when at most half the members answer or none has a leader,
  // DEADLINE_EXCEEDED otherwise.
  absl::Status Unreachable(const CallSpec& spec, std::vector<MemberOutcome> outcomes);

  // One lease renewal (LeaseKeepAlive) within `timeout` (zero:
  // call_timeout); the renewed TTL in seconds, NOT_FOUND when etcd says the
  // lease is gone. Without diagnosis when `diagnose` is false.
  absl::StatusOr<int64_t> KeepAliveOnce(int64_t id, absl::Duration timeout, bool diagnose);

  int current() const;
  void SetCurrent(int i);
};

}  // namespace meshrun::rendezvous::state::etcd
