// bench/rdzv_scale: a real 3-member etcd cluster (Debian's etcd-server) on
// loopback for the runs with the state in etcd (--state_modes=etcd), each
// member started through tests/etcd/etcd_member.sh (the one place that knows
// a test member's flags) with fsync on and etcd's fast timing (leases of 1 s
// allowed). Members die with this process (--die-with-parent).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace meshrun::bench {

class EtcdMembers {
 public:
  // Starts `count` members with data dirs and logs under `dir` (created),
  // on free ports; does not wait for them (the replicas' --state start
  // waits for etcd). `member_script`: tests/etcd/etcd_member.sh.
  // UNAVAILABLE when etcd is not installed or a member cannot be spawned.
  static absl::StatusOr<std::unique_ptr<EtcdMembers>> Start(const std::string& member_script, const std::string& dir,
                                                            int count = 3);
  // SIGKILLs every member still running and reaps it.
  ~EtcdMembers();

  int size() const { return static_cast<int>(members_.size()); }
  // "127.0.0.1:PORT" of member i's client port.
  std::string ClientAddress(int i) const;
  // "etcd://M_first,others.../PREFIX": member `first` listed first (the
  // replica on its "host" talks to it first).
  std::string Url(int first, const std::string& prefix) const;
  // SIGKILLs member i (as its host dying) and reaps it.
  void Kill(int i);

 private:
  struct Member {
    pid_t pid = -1;
    int client_port = 0;
    int peer_port = 0;
  };
  EtcdMembers() = default;
  std::vector<Member> members_;
};

}  // namespace meshrun::bench
