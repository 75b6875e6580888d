// Leader election among the replicas of the rendezvous server, through etcd,
// with fenced writes: etcd decides who leads; meshrun has no consensus code.
//
// How (the recipe of etcd's Go concurrency package, clientv3/concurrency,
// written anew over the Client's KV and Lease calls):
//   - a candidate grants a lease (ElectionOptions::lease_ttl_s, which etcd
//     raises to ceil(1.5 x its election timeout): 2 s with etcd's defaults, 1 s
//     with --heartbeat-interval=50 --election-timeout=500) and keeps it alive
//     in the background (LeaseKeeper);
//   - it creates the key <prefix><lease id in hex> with its id and value,
//     attached to the lease, in a Txn that creates it only if absent;
//   - the candidate whose key has the lowest create revision under the
//     prefix leads. The others watch the prefix and check again when a key
//     goes (and every recheck_interval regardless); keys are only ever added
//     after theirs, so a candidate that is first stays first while its key
//     lives.
// etcd's own v3election gRPC service (Campaign, Leader, Observe, Resign) runs
// the same recipe inside the etcd member, but its Campaign is one blocking
// call held on one member: when that member dies the call fails and the
// campaign must restart, and it hides the lease, so the candidate cannot tell
// how long its leadership is sure to last. Here the lease, the key and every
// call go through the Client's fail-over and timeouts, and the candidate
// knows its lease's guaranteed remaining time.
//
// Fencing. FencedTxn runs the caller's Txn nested in one whose compare
// requires that the leader's key still exists with its create revision and
// its lease. A leader whose lease expired or was revoked (cut off from etcd
// longer than its TTL, or revoked by an operator) has no key any more, so
// etcd refuses its write: FAILED_PRECONDITION, and it is deposed. Another
// candidate can lead only after that key is gone, so etcd never accepts a
// write of two leaders interleaved: once the next leader's key is first, the
// old leader's fenced writes fail.
//
// Exactly once. A write sent to a member whose etcd leader just died waits
// for an answer that never comes (its proposal went to the dead leader), or
// one that was in flight may still commit under the next etcd leader: its
// outcome is unknown (OutcomeUnknown). FencedTxn makes its writes safe to
// repeat and repeats them: each also sets a marker key (ElectionOptions::
// marker_key) to the write's own id, and requires the marker's revision to be
// the one the leader's last write left. A second try after an unknown outcome
// applies at most once - if the first applied, the marker holds its id and
// the retry reports it (TxnResult::replayed); if the first commits later, its
// compare fails. The leader's fenced writes therefore go one at a time (a
// replica's writes are one ordered log; batch them: one Txn per closed
// round), and each branch of the caller's Txn may hold one op less than
// etcd's --max-txn-ops (127 of 128).
//
// Stop serving in time. A leader also learns by its own clock that its
// lease may be lost, before anyone else can take over: its LeaseKeeper counts
// the lease as unconfirmed TTL - margin after sending the last renewal etcd
// confirmed. etcd's leader renewed it after that send, so etcd's expiry - the
// earliest moment another candidate could be elected - comes later. At that
// moment IsLeader() turns false and on_paused is called: the leader must stop
// serving. It may not have lost anything: etcd electing its own leader (after
// losing a member) stalls renewals for about an election timeout and then
// extends every lease by its TTL, and a quorum that comes back does the same.
// The keeper goes on renewing; a confirmed renewal proves the lease - and so
// the key, and the leadership - lived throughout (no lease comes back after
// expiring, and no candidate leads while an earlier key exists): on_resumed,
// and IsLeader() is true again. When etcd answers that the lease is gone, or
// a fenced write finds the key gone, the candidacy ends: on_deposed. Clock
// rates of the hosts are assumed to agree within the margin over one TTL
// (NTP-disciplined clocks differ by far less).
//
// Choosing the TTL. A leader pauses when no renewal is confirmed for TTL -
// margin - interval at worst (interval: a third of the TTL, at most 250 ms;
// margin: a tenth, at most 250 ms): etcd's own election after losing its
// leader takes one to two election timeouts, so a TTL of 1 s (0.65 s of
// tolerance) on etcd with --election-timeout=500 pauses the leader briefly
// in that case, and 2 s (1.55 s) does not; with etcd's defaults (election
// timeout 1 s), 3 s (2.5 s). The
// fail-over after the leader's death grows with the TTL (below).
//
// Fail-over time after the leader dies (kill -9 of its process or host):
// its lease runs out at most TTL after its last renewal; etcd's lessor looks
// for expired leases every 500 ms and deletes their keys; the next candidate's
// watch sees the delete and checks. So about TTL + 0.5 s at most. When etcd's
// own leader died with it, etcd first elects a new one and extends every
// lease by the TTL plus an election timeout from then (bench/rdzv_scale and
// docs/etcd.md for measured figures); so the leading replica keeps etcd's
// leader off its own host's member (leader_apart.h). Losing one etcd member
// otherwise changes nothing: the candidates' clients move to another member
// within their dial timeout.
//
// Thread-safety: every method may be called from any thread. Callbacks run on
// the thread that noticed (on_elected: the campaign's; on_deposed: the lease
// keeper's, the watch's, the campaign's, or the caller's of a refused
// FencedTxn), never under the election's lock. They may call IsLeader, Self,
// Leader and FencedTxn; they must not call Campaign or Resign (refused,
// FAILED_PRECONDITION) nor destroy the Election: hand the event to another
// thread (the server's own loop) that does.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rendezvous/state/etcd/client/etcd_client.h"
#include "rendezvous/state/etcd/client/etcd_types.h"

namespace meshrun::rendezvous::state::etcd {

struct ElectionOptions {
  // Where the candidates' keys live, e.g. "/meshrun/election/": everything
  // under it is the election's. Must end with '/'.
  std::string prefix;
  // The fenced writes' marker (see "Exactly once"); "": the prefix without
  // its '/' and ".fence" ("/meshrun/election.fence"). Never under the prefix.
  std::string marker_key;
  // Tries of one FencedTxn whose outcome was unknown (each within the
  // client's call_timeout).
  int max_write_attempts = 3;
  // The lease's TTL, seconds (etcd raises it to its floor; see above).
  int64_t lease_ttl_s = 2;
  // A waiting candidate checks again this often even without a watch event
  // (a safety net: the watch normally says at once).
  absl::Duration recheck_interval = absl::Seconds(1);
  // Renewal interval and loss margin of the candidate's lease.
  KeepAliveOptions keepalive;
};

// Who leads (or campaigns): what its Campaign gave, and its key.
struct LeaderInfo {
  std::string candidate_id;
  std::string value;            // E.g. the replica's address.
  std::string key;              // <prefix><lease id in hex>.
  int64_t create_revision = 0;  // Of the key: lower leads.
  int64_t lease = 0;
};

struct ElectionCallbacks {
  // This candidate leads now (once per Campaign).
  std::function<void(const LeaderInfo& self)> on_elected;
  // The leader's lease was not confirmed within its TTL: stop serving now
  // (it may still lead; see "Stop serving in time"). Names the last error.
  std::function<void(const absl::Status& why)> on_paused;
  // A renewal was confirmed after on_paused: it led throughout; serve again.
  std::function<void()> on_resumed;
  // This candidate's lease is sure to exist until `valid_until` (steady
  // clock): no other candidate can lead before then. Told at Campaign and
  // after every confirmed renewal, whether it leads or not. A leader must
  // not serve past it unless told a later one (ServingGate::SetValidUntil).
  std::function<void(std::chrono::steady_clock::time_point valid_until)> on_lease_valid_until;
  // The candidacy ended without Resign: etcd says the lease expired or was
  // revoked (NOT_FOUND), the key was deleted (NOT_FOUND), or a FencedTxn was
  // refused (FAILED_PRECONDITION). Called once, whether it led or not. A
  // leader must stop serving when this comes (IsLeader() is false from the
  // same moment); Campaign may be called again.
  std::function<void(const absl::Status& why)> on_deposed;
};

class LeaderObserver;

class Election {
 public:
  // `client` must outlive the Election.
  Election(Client* client, ElectionOptions options);
  // Resigns when campaigning (bounded by the client's call_timeout).
  ~Election();
  Election(const Election&) = delete;
  Election& operator=(const Election&) = delete;

  // Enters the election as `candidate_id` (not empty, at most 256 bytes, no
  // newline) with `value`: grants the lease, writes the key, and returns once
  // they are in etcd; on_elected follows when this candidate leads (perhaps
  // at once). INVALID_ARGUMENT for a bad id or prefix, FAILED_PRECONDITION
  // while a candidacy is running (Resign first; after on_deposed, Campaign
  // may be called again), the Client's errors otherwise.
  absl::Status Campaign(const std::string& candidate_id, const std::string& value, ElectionCallbacks callbacks);

  // True while this candidate leads and may serve: elected, not deposed,
  // and its lease is sure to exist on etcd now (not paused:
  // LeaseKeeper::guaranteed_remaining).
  bool IsLeader() const;
  // This candidate's key and revision while campaigning; nullopt otherwise.
  std::optional<LeaderInfo> Self() const;

  // Ends the candidacy: stops waiting and renewing, revokes the lease (which
  // deletes the key, so the next candidate leads at once). on_deposed is not
  // called. OK when not campaigning; after on_deposed, only stops (the lease
  // is gone or expires by its TTL). The Client's error when the revoke
  // failed (the lease then expires by its TTL).
  absl::Status Resign();

  // Who leads now (a linearizable read): the candidate with the lowest
  // create revision under the prefix; nullopt when there is none.
  absl::StatusOr<std::optional<LeaderInfo>> Leader();

  // Runs `txn` only while this candidate leads, exactly once (see Fencing
  // and Exactly once above): the nested Txn's result when etcd ran it
  // (replayed when an earlier try had); FAILED_PRECONDITION (and on_deposed)
  // when the leader's key is gone or no longer this candidate's lease and
  // revision; FAILED_PRECONDITION at once when this candidate was never
  // elected or was deposed (also checked between tries); the Client's errors
  // otherwise - after max_write_attempts tries of unknown outcome, that
  // error (OutcomeUnknown). While paused it still tries: etcd's compare is
  // the judge, and a write that passes it proves the leadership. One at a
  // time: concurrent calls wait.
  absl::StatusOr<TxnResult> FencedTxn(const Txn& txn);

  // Calls `on_change` with the leader now, then at each change of leader
  // (nullopt: none), on the observer's thread, until it is destroyed.
  std::unique_ptr<LeaderObserver> Observe(std::function<void(const std::optional<LeaderInfo>&)> on_change);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A running Observe. Destroying it stops it.
class LeaderObserver {
 public:
  ~LeaderObserver();
  LeaderObserver(const LeaderObserver&) = delete;
  LeaderObserver& operator=(const LeaderObserver&) = delete;

  // Reads the leader from etcd now and reports it to on_change when it
  // changed since the last report: for a replica just deposed, whose watch
  // may be re-established on another member and not have told it yet. One
  // etcd read, bounded by the client's call_timeout; a failed read reports
  // nothing (the watch's next event reads again). Thread-safe: reads and
  // reports are serialized with the watch's.
  void Refresh();

  struct Impl;
  explicit LeaderObserver(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// The key value of a candidate: "<candidate_id>\n<value>"; and back
// (INVALID_ARGUMENT without the newline). Pure.
std::string EncodeCandidate(const std::string& candidate_id, const std::string& value);
absl::Status DecodeCandidate(const std::string& encoded, std::string* candidate_id, std::string* value);

}  // namespace meshrun::rendezvous::state::etcd
