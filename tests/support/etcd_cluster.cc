#include "tests/support/etcd_cluster.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "common/net.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "tests/support/subprocess.h"

namespace meshrun::testing {
namespace {

std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    const std::string p = (dir.empty() ? "." : dir) + "/" + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

double Elapsed(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string ReadAll(const std::string& path) { return ReadFile(path); }

}  // namespace

std::string EtcdCluster::EtcdBinary() {
  if (const char* e = std::getenv("ETCD_BINARY"); e != nullptr && access(e, X_OK) == 0) return e;
  return FindInPath("etcd");
}

std::string EtcdCluster::EtcdctlBinary() { return FindInPath("etcdctl"); }

EtcdCluster::EtcdCluster(EtcdClusterOptions options) : options_(std::move(options)) {
  dir_ = TempDir();
  for (int i = 0; i < options_.members; ++i) {
    MemberProc m;
    m.name = "e" + std::to_string(i);
    members_.push_back(m);
  }
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < size(); ++i) Kill(i);
}

bool EtcdCluster::PickPorts() {
  ++attempt_;
  for (auto& m : members_) {
    absl::StatusOr<int> c = FindFreePort("127.0.0.1");
    absl::StatusOr<int> p = FindFreePort("127.0.0.1");
    if (!c.ok() || !p.ok() || *c == *p) {
      error_ = "no free port";
      return false;
    }
    m.client_port = *c;
    m.peer_port = *p;
    // Fresh data dirs for every attempt: a half-started member's dir would
    // carry the old ports.
    m.data_dir = dir_ + "/" + m.name + ".a" + std::to_string(attempt_);
    m.log = dir_ + "/" + m.name + ".log";
  }
  return true;
}

std::string EtcdCluster::ClientAddress(int i) const {
  return "127.0.0.1:" + std::to_string(members_[i].client_port);
}

std::string EtcdCluster::Endpoints() const {
  std::string out;
  for (int i = 0; i < size(); ++i) out += (i ? "," : "") + ClientAddress(i);
  return out;
}

std::string EtcdCluster::Url(const std::string& prefix) const {
  return std::string(options_.tls_dir.empty() ? "etcd://" : "etcds://") + Endpoints() + prefix;
}

std::string EtcdCluster::LogTail(int i, int lines) const {
  std::string all = ReadAll(members_[i].log);
  size_t pos = all.size();
  for (int n = 0; n <= lines && pos != std::string::npos && pos > 0; ++n) pos = all.rfind('\n', pos - 1);
  return pos == std::string::npos ? all : all.substr(pos + 1);
}

bool EtcdCluster::StartMember(int i) {
  MemberProc& m = members_[i];
  std::string cluster;
  for (int j = 0; j < size(); ++j) {
    cluster += (j ? "," : "") + members_[j].name + "=http://127.0.0.1:" + std::to_string(members_[j].peer_port);
  }
  std::vector<std::string> argv = {"/bin/bash",
                                   SourceDir() + "/tests/etcd/etcd_member.sh",
                                   "--name", m.name,
                                   "--data-dir", m.data_dir,
                                   "--client", ClientAddress(i),
                                   "--peer", "127.0.0.1:" + std::to_string(m.peer_port),
                                   "--cluster", cluster,
                                   "--token", "t" + std::to_string(getpid()) + "a" + std::to_string(attempt_),
                                   "--die-with-parent"};
  if (options_.fast) argv.push_back("--fast");
  if (!options_.fsync) argv.push_back("--no-fsync");
  if (!options_.tls_dir.empty()) {
    argv.push_back("--tls");
    argv.push_back(options_.tls_dir);
    if (options_.client_cert_auth) argv.push_back("--client-cert-auth");
  }
  if (!options_.extra_flags.empty()) {
    argv.push_back("--");
    argv.insert(argv.end(), options_.extra_flags.begin(), options_.extra_flags.end());
  }
  std::map<std::string, std::string> env;
  env["ETCD_BINARY"] = EtcdBinary();
  // etcd's environment variables (ETCD_*) would override the flags: none.
  m.pid = StartCommand(argv, env, m.log + ".out", m.log);
  return m.pid > 0;
}

bool EtcdCluster::Start(double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int tries = 0; tries < 3; ++tries) {
    if (!PickPorts()) return false;
    bool spawned = true;
    for (int i = 0; i < size(); ++i) spawned = spawned && StartMember(i);
    if (!spawned) {
      error_ = "could not start etcd_member.sh";
      return false;
    }
    const double left = timeout_s - Elapsed(t0);
    if (left > 0 && WaitHealthy(left)) return true;
    const std::string waited = error_;  // WaitHealthy's own words.
    // A member that exited (a port taken between FindFreePort and its bind):
    // all go, and the next try takes new ports.
    // WaitHealthy reaps a member it finds gone (pid -1); the others are
    // checked here.
    bool exited = false;
    for (int i = 0; i < size(); ++i) {
      int st = 0;
      if (members_[i].pid <= 0 || waitpid(members_[i].pid, &st, WNOHANG) == members_[i].pid) {
        exited = true;
        members_[i].pid = -1;
      }
    }
    std::string tails;
    for (int i = 0; i < size(); ++i) tails += "\n--- " + members_[i].name + ":\n" + LogTail(i);
    error_ = "etcd did not become healthy within " + std::to_string(timeout_s) + " s (" + waited + "):" + tails;
    for (int i = 0; i < size(); ++i) Kill(i);
    if (!exited || Elapsed(t0) >= timeout_s) return false;
  }
  return false;
}

void EtcdCluster::Kill(int i) {
  MemberProc& m = members_[i];
  if (m.pid <= 0) return;
  ::kill(m.pid, SIGKILL);
  int st = 0;
  waitpid(m.pid, &st, 0);
  m.pid = -1;
}

bool EtcdCluster::Restart(int i) {
  if (members_[i].pid > 0) return true;
  return StartMember(i);
}

unsigned long long EtcdCluster::IdOf(int i, double timeout_s) const {
  etcdserverpb::StatusResponse resp;
  if (!StatusOf(i, timeout_s, &resp)) return 0;
  return resp.header().member_id();
}

unsigned long long EtcdCluster::LeaderSeenBy(int i, double timeout_s) const {
  etcdserverpb::StatusResponse resp;
  if (!StatusOf(i, timeout_s, &resp)) return 0;
  return resp.leader();
}

int EtcdCluster::LeaderIndex(double timeout_s) const {
  const auto t0 = std::chrono::steady_clock::now();
  while (Elapsed(t0) < timeout_s) {  // Polls every 50 ms.
    for (int i = 0; i < size(); ++i) {
      if (members_[i].pid <= 0) continue;
      etcdserverpb::StatusResponse resp;
      if (StatusOf(i, 0.5, &resp) && resp.leader() != 0 && resp.leader() == resp.header().member_id()) return i;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

bool EtcdCluster::MoveLeader(int i, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  const unsigned long long target = IdOf(i, timeout_s);
  if (target == 0) {
    error_ = members_[i].name + " does not answer";
    return false;
  }
  while (Elapsed(t0) < timeout_s) {  // Bounded: a few tries while leadership settles.
    const int leader = LeaderIndex(timeout_s - Elapsed(t0));
    if (leader < 0) break;
    if (leader != i) {
      auto stub = etcdserverpb::Maintenance::NewStub(Channel(leader));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      etcdserverpb::MoveLeaderRequest req;
      req.set_targetid(target);
      etcdserverpb::MoveLeaderResponse resp;
      grpc::Status s = stub->MoveLeader(&ctx, req, &resp);
      if (!s.ok()) error_ = "MoveLeader: " + s.error_message();
    }
    bool all = true;
    for (int j = 0; j < size(); ++j) {
      if (members_[j].pid > 0) all = all && LeaderSeenBy(j, 0.5) == target;
    }
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // Polling the members' view.
  }
  if (error_.empty()) error_ = "etcd's leadership did not move to " + members_[i].name;
  return false;
}

std::shared_ptr<grpc::Channel> EtcdCluster::Channel(int i) const {
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!options_.tls_dir.empty()) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = ReadAll(options_.tls_dir + "/ca.crt");
    o.pem_cert_chain = ReadAll(options_.tls_dir + "/host.crt");
    o.pem_private_key = ReadAll(options_.tls_dir + "/host.key");
    creds = grpc::SslCredentials(o);
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(ClientAddress(i), creds, args);
}

bool EtcdCluster::StatusOf(int i, double timeout_s, etcdserverpb::StatusResponse* resp) const {
  auto stub = etcdserverpb::Maintenance::NewStub(Channel(i));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1000)));
  ctx.set_wait_for_ready(true);  // Until the deadline: the member may still be starting.
  etcdserverpb::StatusRequest req;
  return stub->Status(&ctx, req, resp).ok();
}

bool EtcdCluster::WaitHealthy(double timeout_s, std::vector<int> which) {
  if (which.empty()) {
    for (int i = 0; i < size(); ++i) {
      if (members_[i].pid > 0) which.push_back(i);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Polls the members' state every 50 ms: bounded by timeout_s.
  while (Elapsed(t0) < timeout_s) {
    bool all = true;
    for (int i : which) {
      int st = 0;
      if (members_[i].pid <= 0 || waitpid(members_[i].pid, &st, WNOHANG) == members_[i].pid) {
        members_[i].pid = -1;
        error_ = members_[i].name + " is not running:\n" + LogTail(i);
        return false;
      }
      all = all && LeaderSeenBy(i, 0.5) != 0;
      if (!all) break;
    }
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  error_ = "etcd members did not all see a leader within " + std::to_string(timeout_s) + " s";
  return false;
}

bool EtcdCluster::Etcdctl(const std::vector<std::string>& args, std::string* out) {
  const std::string ctl = EtcdctlBinary();
  if (ctl.empty()) {
    error_ = "etcdctl not found (Debian's etcd-client)";
    return false;
  }
  std::vector<std::string> argv = {ctl, "--endpoints=" + Endpoints(), "--command-timeout=5s"};
  if (!options_.tls_dir.empty()) {
    argv.push_back("--cacert=" + options_.tls_dir + "/ca.crt");
    argv.push_back("--cert=" + options_.tls_dir + "/host.crt");
    argv.push_back("--key=" + options_.tls_dir + "/host.key");
  }
  argv.insert(argv.end(), args.begin(), args.end());
  RunResult r = RunCommand(argv, {{"ETCDCTL_API", "3"}}, 30);
  if (out != nullptr) *out = r.out;
  if (r.exit_code != 0) {
    error_ = "etcdctl";
    for (const auto& a : args) error_ += " " + a;
    error_ += " failed: " + r.err + r.out;
    return false;
  }
  return true;
}

bool EtcdCluster::EnableAuth(const std::string& root_password, const std::string& user, const std::string& password,
                             const std::string& prefix) {
  return Etcdctl({"user", "add", "root:" + root_password}) && Etcdctl({"role", "add", "meshrun"}) &&
         Etcdctl({"role", "grant-permission", "meshrun", "--prefix=true", "readwrite", prefix}) &&
         Etcdctl({"user", "add", user + ":" + password}) && Etcdctl({"user", "grant-role", user, "meshrun"}) &&
         Etcdctl({"auth", "enable"});
}

}  // namespace meshrun::testing
