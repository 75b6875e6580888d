// Test fixture: a real etcd cluster (Debian's etcd-server) of N members on
// loopback, each on free ports with a fresh data dir, started through
// tests/etcd/etcd_member.sh. Start() returns once every member reports a
// leader (Maintenance.Status, a state, not a sleep). Members are SIGKILLed and
// reaped when the fixture is destroyed, when the test case ends
// (StartCommand's KillStartedCommands), and when the test process dies
// (--die-with-parent). Single-threaded: use it from the test's own thread.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace grpc {
class Channel;
}
namespace etcdserverpb {
class StatusResponse;
}

namespace meshrun::testing {

struct EtcdClusterOptions {
  int members = 3;
  // --heartbeat-interval=50 --election-timeout=500 (leases of 1 s).
  bool fast = true;
  // false: --unsafe-no-fsync (tests only).
  bool fsync = false;
  // Clients speak TLS with DIR/host.crt and host.key (tests/support/certs.h);
  // client_cert_auth: etcd also requires a client certificate signed by DIR/ca.crt.
  std::string tls_dir;
  bool client_cert_auth = false;
  // More flags for etcd itself (e.g. {"--auth-token-ttl", "1"}).
  std::vector<std::string> extra_flags;
};

class EtcdCluster {
 public:
  // The etcd binary, or "" when it is not installed (the test then skips).
  static std::string EtcdBinary();
  static std::string EtcdctlBinary();

  explicit EtcdCluster(EtcdClusterOptions options = {});
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // Starts every member and waits until each reports a leader, at most
  // `timeout_s`; picks new ports and tries again (3 times at most) when a
  // member exits at start (a port taken meanwhile). false with error()
  // (and the members' logs' tails) otherwise.
  bool Start(double timeout_s = 30);
  const std::string& error() const { return error_; }

  int size() const { return static_cast<int>(members_.size()); }
  // "127.0.0.1:PORT" of member i, and all of them joined with ','.
  std::string ClientAddress(int i) const;
  std::string Endpoints() const;
  // "etcd://127.0.0.1:P0,...,127.0.0.1:P2<prefix>" (etcds:// with TLS).
  std::string Url(const std::string& prefix = "/meshrun") const;
  pid_t pid(int i) const { return members_[i].pid; }
  bool running(int i) const { return members_[i].pid > 0; }
  std::string LogTail(int i, int lines = 20) const;

  // SIGKILLs member i and reaps it.
  void Kill(int i);
  // Starts member i again on its data dir and ports; does not wait.
  bool Restart(int i);
  // Waits until the given members (all running ones when empty) report a
  // leader, at most timeout_s.
  bool WaitHealthy(double timeout_s, std::vector<int> which = {});
  // The member id that member i sees as leader (0: none or no answer).
  unsigned long long LeaderSeenBy(int i, double timeout_s = 1) const;
  // Member i's own id (0: no answer).
  unsigned long long IdOf(int i, double timeout_s = 1) const;
  // The index of etcd's leader (-1: none agreed on within timeout_s).
  int LeaderIndex(double timeout_s = 5) const;
  // Makes member i etcd's leader (Maintenance.MoveLeader, sent to the
  // leader) and waits until every running member sees it, at most timeout_s.
  bool MoveLeader(int i, double timeout_s = 10);

  // Enables etcd's authentication with etcdctl: a root user (password
  // root_password), and `user` (password `password`) with a role that may
  // read and write every key under `prefix`. false with error() otherwise.
  bool EnableAuth(const std::string& root_password, const std::string& user, const std::string& password,
                  const std::string& prefix);

 private:
  struct MemberProc {
    std::string name;
    std::string data_dir;
    std::string log;
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;
  };
  bool StartMember(int i);
  bool PickPorts();
  bool Etcdctl(const std::vector<std::string>& args, std::string* out = nullptr);
  std::shared_ptr<grpc::Channel> Channel(int i) const;
  bool StatusOf(int i, double timeout_s, etcdserverpb::StatusResponse* resp) const;

  EtcdClusterOptions options_;
  std::string dir_;
  std::vector<MemberProc> members_;
  std::string error_;
  int attempt_ = 0;
};

}  // namespace meshrun::testing
