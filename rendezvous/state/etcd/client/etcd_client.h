// A client of etcd's v3 gRPC API (KV, Lease, Watch, Maintenance, Cluster,
// Auth) over several members, for the replicated rendezvous server's state.
// Its public types carry no gRPC or protobuf (etcd_types.h); the stubs are
// meshrun_etcd_proto's, generated from etcd's own .proto files.
//
// Members and fail-over. The client keeps one gRPC channel per member and
// sends each call to the member that answered last (at first, the first of
// ClientOptions::members: list the member on this host first). A call moves
// on to the next member when its member
//   - cannot be connected to within dial_timeout (down, refused, TLS failure),
//   - answers "etcdserver: no leader" (every call carries etcd's "hasleader"
//     metadata, as clientv3.WithRequireLeader does: a member cut off from the
//     leader refuses at once, before proposing anything; while some member
//     says so, the call goes on trying the members, 400 ms apart at most,
//     for up to call_timeout (or the call's own time, when shorter), so it
//     rides out etcd's own election), or
//   - for a read (Range, Status, lease TTL and keep-alive), fails in any
//     transient way (its connection broke, attempt_timeout passed).
// A write (Put, Delete, Txn, LeaseGrant, LeaseRevoke) that was sent and then
// broke (connection lost, attempt_timeout, "etcdserver: request timed out",
// "leader changed") is NOT retried: etcd may have applied it, so the call
// fails UNAVAILABLE / DEADLINE_EXCEEDED saying the outcome is unknown, and the
// caller decides (a fenced write, election.h, can be re-read).
//
// Timeouts. Every call ends within call_timeout (all members and retries
// together), plus at most probe_timeout when it failed and the client probed
// the members to say why in one line. No call waits without a deadline.
//
// Errors: absl::Status, one line naming the etcd member(s) and the cause.
//   UNAVAILABLE        no member reachable ("etcd unreachable: 10.0.0.1:2379:
//                      connection refused; ..."), quorum lost ("etcd has no
//                      leader (quorum lost?): ..."), a write's outcome unknown.
//   DEADLINE_EXCEEDED  the call's time ran out with members reachable.
//   FAILED_PRECONDITION a TLS mismatch (plain client and TLS etcd, or the
//                      reverse; a certificate that fails verification; a
//                      client certificate missing or refused) - the cause from
//                      ProbeTlsMismatch (common/security.h), in etcd's words;
//                      also etcd auth configured here but not enabled there.
//   UNAUTHENTICATED    etcd's authentication refused the user or password, or
//                      etcd requires authentication and no user is set.
//   PERMISSION_DENIED  the user's roles do not allow the key.
//   RESOURCE_EXHAUSTED a Txn above etcd's --max-txn-ops (128 by default) or a
//                      request above its --max-request-bytes (1.5 MiB).
//   NOT_FOUND          a lease that expired or was revoked.
//   OUT_OF_RANGE       a revision that was compacted (or is in the future).
//   INVALID_ARGUMENT   a request etcd refuses as malformed (empty key,
//                      duplicate key in a Txn), or bad options at Create.
//
// Authentication. With a user set, the client calls Auth.Authenticate on the
// member it talks to, sends the token in the "token" metadata of every call
// (as clientv3 does), and authenticates again once when etcd answers that the
// token is invalid (expired: etcd's --auth-token-ttl, 300 s by default).
//
// Thread-safety: every method may be called from any thread. Watchers and
// lease keepers run on threads of their own and call their callbacks there,
// one at a time; the Client must outlive them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/endpoint.h"
#include "common/security.h"
#include "rendezvous/state/etcd/client/etcd_types.h"

namespace meshrun::rendezvous::state::etcd {

// The names under which a user gives the etcd connection's settings, used in
// error messages ("... give --state_tls_ca"). The defaults are meshrun
// server's flags (docs/etcd.md).
struct OptionNames {
  std::string url = "--state";
  std::string ca = "--state_tls_ca";
  std::string cert = "--state_tls_cert";
  std::string key = "--state_tls_key";
  std::string user = "--state_user";
  std::string password_file = "--state_password_file";
};

struct ClientOptions {
  // The members, tried in this order at first. At least one.
  std::vector<Endpoint> members;
  // TLS (an etcds:// URL): etcd's certificate is verified against tls.ca_pem
  // (required) and the host name given in `members`; tls.cert_pem/key_pem,
  // when set, are presented to etcd (its --client-cert-auth). tls.files names
  // the files in messages.
  bool use_tls = false;
  TlsMaterial tls;
  // etcd's own authentication (its --auth / `etcdctl auth enable`): empty
  // user: none.
  std::string user;
  std::string password;
  OptionNames names;

  // The whole of one call, fail-over included.
  absl::Duration call_timeout = absl::Seconds(3);
  // One try on one member (a read that times out there moves on to the next
  // member while call_timeout lasts).
  absl::Duration attempt_timeout = absl::Seconds(1);
  // Waiting for a member's connection (TCP and TLS) before moving on.
  absl::Duration dial_timeout = absl::Seconds(1);
  // After a failed call: the probe of each unreachable member (TCP, TLS) and
  // of the members' Status that names the cause (in parallel).
  absl::Duration probe_timeout = absl::Milliseconds(500);
  // HTTP/2 keep-alive pings on idle connections and open streams (watches):
  // a connection whose ping is not answered within keepalive_timeout is
  // dropped and the stream moves to another member. etcd refuses pings more
  // often than its --grpc-keepalive-min-time (5 s by default).
  absl::Duration keepalive_time = absl::Seconds(5);
  absl::Duration keepalive_timeout = absl::Seconds(2);
  // Reconnect back-off of a member's channel after its connection failed.
  absl::Duration min_reconnect_backoff = absl::Milliseconds(100);
  absl::Duration max_reconnect_backoff = absl::Seconds(1);
  // The largest answer accepted (a Range of many keys), bytes.
  int max_receive_bytes = 64 << 20;
  // Told of every call once it ends (its retries and fail-over between
  // members included; watches are not calls): its kind, the first word of
  // the request ("Range", "Put", "DeleteRange", "Txn", "LeaseGrant",
  // "LeaseKeepAlive", ...), its outcome and how long it took. Runs on the
  // calling thread: it must be quick. Empty: none (the server's metrics
  // set it: meshrun_etcd_requests_total).
  std::function<void(const std::string& op, absl::StatusCode code, absl::Duration took)> on_call;
};

// The state changes of a Watcher, for its on_status callback.
struct WatchStatus {
  absl::Status status;  // OK: (re-)established. Otherwise why the stream broke or ended.
  std::string member;   // The member (host:port) it concerns.
  bool final = false;   // No more callbacks after this one (compaction, permission, Cancel is silent).
};

struct WatchOptions {
  std::string range_end;        // "": the key alone; PrefixEnd(key): every key under it.
  int64_t start_revision = 0;   // First revision delivered; 0: changes after the current revision.
  bool prev_kv = false;         // Events carry the key's previous value.
  absl::Duration max_backoff = absl::Seconds(1);  // Between tries to re-establish a broken stream.
};

struct WatchCallbacks {
  // Every event, in revision order, each once: a broken stream is re-opened
  // (on the next member when its member is down) from the revision after the
  // last event delivered. Runs on the watcher's thread.
  std::function<void(const WatchEvent&)> on_event;
  // Optional: established, broken (re-established by itself), final errors:
  // OUT_OF_RANGE when start_revision was compacted (the caller must re-read
  // and watch again), PERMISSION_DENIED / UNAUTHENTICATED.
  std::function<void(const WatchStatus&)> on_status;
};

// A running watch (Client::Watch). Destroying it cancels it.
class Watcher {
 public:
  ~Watcher();
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;
  // Ends the watch and waits until no callback runs any more (from a
  // callback itself it does not wait). Idempotent.
  void Cancel();
  // The revision from which the watch continues (the last delivered event's
  // revision + 1); 0 before the stream was first established.
  int64_t next_revision() const;

  struct Impl;
  explicit Watcher(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

struct KeepAliveOptions {
  // Between renewals; zero: a third of the lease's TTL, at most 250 ms.
  // The lease stays confirmed through an etcd outage (etcd electing its
  // leader) of up to TTL - margin - interval, so a short interval buys
  // tolerance: with a 2 s TTL, 1.55 s at 250 ms against 1.13 s at TTL/3.
  absl::Duration interval = absl::ZeroDuration();
  // The lease counts as unconfirmed this long before the end of its TTL
  // counted from the sending of the last renewal etcd confirmed (etcd's
  // leader renewed it after that send, so its own expiry comes later); zero:
  // a tenth of the TTL, at most 250 ms.
  absl::Duration margin = absl::ZeroDuration();
  // Between tries while renewals fail.
  absl::Duration retry = absl::Milliseconds(100);
};

// What a LeaseKeeper tells, each on its thread, one at a time.
struct LeaseCallbacks {
  // etcd answered that the lease is gone (expired or revoked; TTL 0):
  // NOT_FOUND. Final: the keeper stops.
  std::function<void(const absl::Status&)> on_lost;
  // No renewal was confirmed within the TTL (minus the margin) of the last
  // one's send: the lease may be gone (this process cut off from etcd longer
  // than the TTL) or not (etcd electing its own leader, which extends every
  // lease by the TTL). Names the last error. The keeper goes on renewing;
  // on_confirmed or on_lost follows.
  std::function<void(const absl::Status&)> on_unconfirmed;
  // A renewal was confirmed after on_unconfirmed: the lease existed
  // throughout (an expired lease never comes back).
  std::function<void()> on_confirmed;
  // The lease is sure to exist on etcd until `valid_until` (steady clock):
  // told once the grant is confirmed (on GrantAndKeepAlive's thread) and
  // after every confirmed renewal (before on_confirmed). Nobody else can
  // take what the lease holds before then.
  std::function<void(std::chrono::steady_clock::time_point valid_until)> on_valid_until;
};

// Keeps a lease alive in the background (Client::KeepAlive): renews it every
// `interval` with LeaseKeepAlive, each renewal on the member the client talks
// to (failing over as every call does), and says when it is unconfirmed, back,
// or lost (LeaseCallbacks). Destroying it stops it (it does not revoke the
// lease: Client::LeaseRevoke does).
class LeaseKeeper {
 public:
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;
  const Lease& lease() const;
  // Stops renewing and waits for the keeper's thread (from a callback it
  // does not wait). Idempotent.
  void Stop();
  // True until etcd said the lease is gone (or Stop); true while unconfirmed.
  bool alive() const;
  // How much longer the lease is sure to exist on etcd, by this process's
  // monotonic clock: TTL - margin after the send of the last confirmed
  // renewal, minus the time since. Zero while unconfirmed, once lost, stopped.
  absl::Duration guaranteed_remaining() const;

  struct Impl;
  explicit LeaseKeeper(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// True when `s` is the failure of a write that was sent and then broke (see
// "Members and fail-over" above): etcd may or may not have applied it, now or
// later (a proposal in flight when etcd's leader died can still commit). The
// caller re-reads, or retries a write made safe to repeat by its compares
// (Election::FencedTxn does so by itself).
bool OutcomeUnknown(const absl::Status& s);

class Client {
 public:
  // Checks the options (INVALID_ARGUMENT naming the fault: no member, TLS
  // without a CA, a password without a user, timeouts not positive) and
  // makes the channels. Does not connect: Connect() does.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Makes sure etcd can serve this client now: a member answers (TLS
  // included), authentication (when set) succeeds and a linearizable read
  // goes through (so etcd has a leader). For a server's start: a bad
  // --state fails here, within call_timeout (+ probe_timeout), with one line.
  absl::Status Connect();

  // KV. Get reads one key (its range when options.range_end is set);
  // GetPrefix every key starting with `prefix` (page with options.limit and
  // a next call from the last key + '\0'). `timeout` (zero: the client's
  // call_timeout and attempt_timeout) bounds the whole call and each try
  // alike, for a read that may take long (a load of the state): it is
  // waited for, never sent again to another member while etcd may still be
  // working on it (etcd 3.4 does not stop a Range its caller gave up on).
  absl::StatusOr<RangeResult> Get(const std::string& key, const RangeOptions& options = {},
                                  absl::Duration timeout = absl::ZeroDuration());
  absl::StatusOr<RangeResult> GetPrefix(const std::string& prefix, RangeOptions options = {});
  absl::StatusOr<PutResult> Put(const std::string& key, const std::string& value, int64_t lease = 0,
                                bool prev_kv = false);
  // Deletes the key, or [key, range_end) when range_end is set.
  absl::StatusOr<DeleteResult> Delete(const std::string& key, const std::string& range_end = "",
                                      bool prev_kv = false);
  absl::StatusOr<DeleteResult> DeletePrefix(const std::string& prefix);
  absl::StatusOr<TxnResult> Transact(const Txn& txn);
  // Compacts etcd's history up to `revision` (etcdctl compaction
  // --physical): revisions before it can no longer be read or watched from
  // (a watch from one ends OUT_OF_RANGE; see WatchCallbacks). Returns once
  // the compaction is applied. etcd's refusal (named in one line) when
  // `revision` was compacted already or is in the future.
  absl::Status Compact(int64_t revision);

  // Leases (TTL in seconds; etcd may raise it, Lease::ttl_s says to what).
  absl::StatusOr<Lease> LeaseGrant(int64_t ttl_s);
  // NOT_FOUND when it expired or was revoked already.
  absl::Status LeaseRevoke(int64_t id);
  // One renewal: the TTL it was renewed to, seconds. NOT_FOUND when the
  // lease expired or was revoked. Within `timeout` (zero: call_timeout).
  absl::StatusOr<int64_t> LeaseKeepAliveOnce(int64_t id, absl::Duration timeout = absl::ZeroDuration());
  // Seconds left (LeaseTimeToLive); NOT_FOUND when gone.
  absl::StatusOr<int64_t> LeaseTimeToLive(int64_t id);
  // Keeps `lease` alive (see LeaseKeeper). Its first renewal goes out at
  // once: until it is confirmed, guaranteed_remaining() is zero (the lease
  // starts unconfirmed; on_confirmed follows that renewal).
  std::unique_ptr<LeaseKeeper> KeepAlive(const Lease& lease, LeaseCallbacks callbacks, KeepAliveOptions options = {});
  // Grants a lease and keeps it alive; guaranteed_remaining() counts from
  // the grant's send.
  absl::StatusOr<std::unique_ptr<LeaseKeeper>> GrantAndKeepAlive(int64_t ttl_s, LeaseCallbacks callbacks,
                                                                 KeepAliveOptions options = {});

  // Watches `key` (with options.range_end, a range) from
  // options.start_revision; see WatchCallbacks. Returns at once: the stream
  // is opened on the watcher's thread (on_status says when).
  std::unique_ptr<Watcher> Watch(const std::string& key, WatchOptions options, WatchCallbacks callbacks);

  // One member's status (no fail-over), within call_timeout.
  absl::StatusOr<MemberStatus> StatusOf(const Endpoint& member);
  // Asks etcd's leader, `via` (one of this client's members; it must be
  // etcd's leader now), to hand its leadership to member `transferee_id`
  // (Maintenance.MoveLeader, as `etcdctl move-leader`). etcd waits for the
  // transferee to catch up, within call_timeout. Needs etcd's root role when
  // etcd's auth is on (PERMISSION_DENIED otherwise). Errors name the member
  // and etcd's answer: FAILED_PRECONDITION-like codes as etcd gives them
  // ("etcdserver: not leader" when `via` no longer leads), UNAVAILABLE.
  absl::Status MoveLeader(const Endpoint& via, uint64_t transferee_id);
  // The cluster's members as etcd lists them.
  absl::StatusOr<std::vector<MemberInfo>> MemberList();

  // The member calls go to now (host:port). Thread-safe.
  std::string current_member() const;
  const ClientOptions& options() const;

  struct Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshrun::rendezvous::state::etcd
