// bench/rdzv_scale: the rendezvous servers of one run. Either one in-memory
// `meshrun server`, or (DriverOptions::etcd) a 3-member etcd with 3
// `meshrun server --state` replicas on it, replica i listing member i first
// (its "host's" member). Knows which one leads, and kills the leader's
// "host" (its replica and its etcd member) for the failover phase.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/rdzv_scale/etcd_members.h"
#include "bench/rdzv_scale/server_process.h"

namespace meshrun::bench {

struct ServersOptions {
  std::string meshrun_binary;
  std::vector<std::string> server_args;  // Extra `meshrun server` arguments, every replica.
  std::string log_prefix;                // Logs: <prefix>.log, or <prefix>-r<i>.log and <prefix>-etcd/.
  bool etcd = false;
  int state_lease_ttl_s = 2;
  std::string state_local_member = "auto";
  std::string etcd_member_script;        // tests/etcd/etcd_member.sh
  std::string state_prefix;              // The etcd key prefix of this run ("/rdzv-scale-...").
};

class Servers {
 public:
  // Starts them and (etcd) waits up to 30 s for one to lead. Every server's
  // process group is tracked (driver.h TrackProcessGroup) while it lives.
  // UNAVAILABLE naming what did not start.
  static absl::StatusOr<std::unique_ptr<Servers>> Start(const ServersOptions& options);
  // Stops the servers (SIGTERM, then SIGKILL) and etcd (SIGKILL).
  ~Servers();

  // The one that serves: the server, or the replica that leads.
  ServerProcess& leader() { return *servers_[static_cast<size_t>(leader_)]; }
  int leader_index() const { return leader_; }
  // Every server's "127.0.0.1:PORT", comma-separated: what agents are given.
  std::string endpoints() const;
  // A server other than the leader (for sampling while the leader is gone);
  // the leader itself when it is the only one.
  ServerProcess& other() { return *servers_[static_cast<size_t>((leader_ + 1) % servers_.size())]; }

  // etcd only: "etcd://..." listing the leader's host's member first, as
  // the leader's own --state lists it ("" without etcd).
  std::string LeaderEtcdUrl(const std::string& prefix) const {
    return etcd_ ? etcd_->Url(leader_, prefix) : std::string();
  }
  // etcd only: SIGKILLs the leader's replica and its etcd member together.
  void KillLeaderHost();
  // etcd only, after KillLeaderHost: waits up to `timeout` for another
  // replica to lead, and makes it the leader. false when none did.
  bool AwaitNextLeader(absl::Duration timeout);

 private:
  Servers() = default;
  // The replica (not `except`) that has printed that it leads; -1 if none
  // within `timeout`.
  int LeaderAmong(int except, absl::Duration timeout);

  std::unique_ptr<EtcdMembers> etcd_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::vector<pid_t> tracked_;
  int leader_ = 0;
};

}  // namespace meshrun::bench
