// One replica of a replicated rendezvous server (meshrun server --state
// etcd://...; docs/design.md section 4d, docs/etcd.md): its durable state in
// etcd, and its part in the election of the replica that serves.
//
// Every replica campaigns (election.h: a lease, a key under
// <prefix>/election/; etcd decides). The one that leads loads every run's
// record from etcd (<prefix>/runs/<run id>, one JSON value each: state.h's
// RunRecord), hands them to on_lead (the server restores its runs), then
// opens the gate: it serves. The others keep the gate closed and follow the
// leader's address (the candidates' values), which their refusals name, so
// agents move to the leader. A leader whose lease is not confirmed in time
// closes the gate at once (Election's on_paused: before another replica can
// be elected), and opens it again when a renewal proves it led throughout;
// one that is deposed (its lease gone, a fenced write refused) closes the
// gate, drops its runs (on_stand_by) and campaigns again as a standby.
//
// The journal's writes go through Election::FencedTxn: a replica that no
// longer leads cannot write.
//
// Thread-safety: the methods may be called from any thread. on_lead and
// on_stand_by run on the replica's own thread, one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rendezvous/state/etcd/client/etcd_options.h"
#include "rendezvous/state/etcd/etcd_journal.h"
#include "rendezvous/state/serving_gate.h"
#include "rendezvous/state/state.h"

namespace meshrun::rendezvous::state::etcd {

struct ReplicaOptions {
  Connection connection;  // ResolveConnection's: the URL (members, prefix) and the client's options.
  // "host:port" agents reach this replica on (named in standbys' refusals).
  std::string advertise;
  // This replica's candidate id (e.g. "host:pid"); not empty, no newline.
  std::string id;
  // The election lease's TTL, seconds: a dead leader is replaced within
  // about TTL + 0.5 s (election.h). etcd raises it to its floor.
  int64_t lease_ttl_s = 2;
  // Between renewals of that lease (KeepAliveOptions::interval; zero: a
  // third of the TTL, at most 250 ms).
  absl::Duration lease_renew_interval = absl::ZeroDuration();
  // The etcd member on this replica's host (leader_apart.h LocalMember:
  // "auto", "none" or host:port): while this replica leads, etcd's own
  // leader is moved off it, checked every `leader_apart_interval` (at least
  // 100 ms) from one interval after it starts to lead.
  std::string local_member = "auto";
  absl::Duration leader_apart_interval = absl::Seconds(1);
  // How long a Status call waits for etcd's list of the replicas (a
  // linearizable read, ReplicaList); past it, or once this replica's lease
  // went unconfirmed, Status shows the list as unknown and answers from
  // memory.
  absl::Duration status_read_timeout = absl::Milliseconds(250);
  // How a new leader reads the state (etcd_journal.h): load_timeout bounds
  // each read of it.
  JournalOptions journal;
};

// How this replica came to lead, for the runs' timelines.
struct Takeover {
  // True: it led already and loaded its state again (Reload); false: it
  // was elected.
  bool reload = false;
  // The leader before it as this replica last saw it ("" when unknown or
  // itself), and why it reloads.
  std::string previous_leader;
  std::string why;
  // From its election (or the reload's start) to the state loaded, and the
  // etcd lease TTL: a dead leader is replaced up to that long after it died.
  absl::Duration load_time;
  int64_t lease_ttl_s = 0;
  // The create revision of this replica's election key: larger for every
  // later term (etcd's revisions only grow), so numbers derived from it
  // never go back across a failover (the lighthouses' quorum ids).
  int64_t election_revision = 0;
};

struct ReplicaHooks {
  // This replica leads: restore the server's runs from `records` (every
  // run's latest). The gate opens when it returns.
  std::function<void(const std::vector<RunRecord>& records, const Takeover& takeover)> on_lead;
  // This replica stopped leading (deposed): drop the runs; `why` in one line.
  std::function<void(const std::string& why)> on_stand_by;
};

// One replica as the election lists it.
struct ReplicaInfo {
  std::string id;
  std::string address;
  bool leader = false;
};

class Replica {
 public:
  // Connects to etcd (Client::Connect: a bad --state fails here with one
  // line, within the client's call_timeout; so does a local_member that is
  // not one of --state's members). The gate stays closed. `gate`
  // must outlive the replica.
  static absl::StatusOr<std::unique_ptr<Replica>> Start(ReplicaOptions options, ServingGate* gate,
                                                        ReplicaHooks hooks);
  // Enters the election as `advertise` ("host:port" agents reach this
  // replica on; replaces options.advertise) and returns once the candidacy
  // is in etcd; the gate opens later, once this replica leads and on_lead
  // has returned. The Client's errors. Call once.
  absl::Status Campaign(const std::string& advertise);
  // Resigns (the next replica leads at once) and stops.
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // The journal the server's runs save their records in (fenced writes).
  RunJournal* journal();
  // Every replica in the election, the leader first (a linearizable read),
  // within `timeout` (zero: the client's timeouts, with fail-over between
  // members; else one member, waited for that long).
  absl::StatusOr<std::vector<ReplicaInfo>> Replicas(absl::Duration timeout = absl::ZeroDuration());
  // True while this replica leads and serves.
  bool leading() const;
  // A save of this replica's journal failed, or its outcome is unknown:
  // the runs in memory may be ahead of etcd. While this replica serves, the
  // gate closes at once, the runs are dropped (on_stand_by: their callers
  // get UNAVAILABLE and go on with the next leader, which may be this
  // replica again), and, while it still leads, the state is loaded from
  // etcd again and the gate reopens, as after an election: etcd decides
  // what is true. A replica that does not serve ignores it. Any thread;
  // returns at once; the reloads asked for before one starts are one.
  void Reload(const std::string& why);

  struct Impl;

 private:
  explicit Replica(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshrun::rendezvous::state::etcd
