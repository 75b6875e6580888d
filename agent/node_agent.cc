#include "agent/node_agent.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "agent/session.h"
#include "common/endpoint.h"
#include "common/logging.h"
#include "common/net.h"

namespace meshrun::agent {
namespace {

// meshrun-worker-shim next to the running meshrun binary, or "" (then
// workers run directly: a SIGKILLed agent can leave grandchildren behind).
std::string FindShim() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  std::filesystem::path shim = self.parent_path() / "meshrun-worker-shim";
  if (::access(shim.c_str(), X_OK) != 0) {
    Logger("agent")->warn("{} not found: workers run without it", shim.string());
    return "";
  }
  return shim.string();
}

}  // namespace

int Session::Run() {
  node_.hostname = Hostname();
  node_.pid = ::getpid();
  node_.nproc = o_.nproc;
  node_.node_rank_hint = o_.node_rank;
  node_.is_endpoint_host = o_.is_endpoint_host;
  node_.role = o_.role;
  config_.min_nodes = o_.min_nodes;
  config_.max_nodes = o_.max_nodes;
  config_.last_call_timeout = o_.last_call_timeout;
  config_.max_restarts = o_.max_restarts;
  config_.exit_barrier_timeout = o_.exit_barrier_timeout;
  config_.keep_alive_interval = o_.keep_alive_interval;
  config_.keep_alive_max_attempt = o_.keep_alive_max_attempt;

  BecomeSubreaper();
  signals_ = std::make_unique<SignalThread>(
      o_.forwarded_signals,
      [this](int s) {
        if (!PassThrough(s)) stop_signal_.store(s);
        q_.Push(SignalReceived{s});
      },
      [this](pid_t p, int st) { q_.Push(ChildExit{p, st}); });
  if (absl::Status s = signals_->Start(); !s.ok()) return Fatal(s.ToString());

  // Several replicas ("h1:p,h2:p,...", checked by the launcher): the client follows their leader.
  const bool replicas = o_.endpoint.find(',') != std::string::npos;
  absl::StatusOr<Endpoint> ep = ParseEndpoint(replicas ? o_.endpoint.substr(0, o_.endpoint.find(',')) : o_.endpoint, 29400);
  if (!ep.ok()) return Fatal(std::string(ep.status().message()));
  // The advertised address is decided by the server at each round
  // (docs/design.md section 4b); this node only states an explicit --local_addr.
  if (!o_.local_addr.empty()) {
    absl::StatusOr<std::vector<std::string>> addrs = ResolveNumeric(o_.local_addr);
    if (!addrs.ok()) return Fatal(absl::StrCat("--local_addr=", o_.local_addr, ": ", addrs.status().message()));
    node_.addr = addrs->front();
    node_.local_addr = o_.local_addr;
  }
  endpoint_ = replicas ? o_.endpoint : ep->ToString();
  shim_ = FindShim();
  if (absl::Status s = PrepareLogDir(); !s.ok()) return Fatal(std::string(s.message()));
  if (absl::Status s = NewMembership(); !s.ok()) return MembershipFailed(s);
  int code = Loop();
  EndOfJob();
  // A job of replica groups ends as one: every agent waits for its groups.
  if (o_.replica_groups > 0 && replica_group_ >= 0 && received_signal_ == 0) code = AwaitReplicaGroups(code);
  proxy_.reset();   // The workers are gone: their store goes (its folder is removed).
  EndMembership();  // Stops the watch and heartbeat threads before the queue goes away.
  CleanLogDir(code);
  return code;
}

int Session::Fatal(const std::string& msg) {
  std::fprintf(stderr, "meshrun: error: %s\n", msg.c_str());
  return 1;
}

int Session::MembershipFailed(const absl::Status& s) {
  if (o_.replica_groups > 0 && replica_group_ < 0 && client_) {
    if (std::optional<int> code = StandbyAtJobEnd(s)) return *code;  // A standby not needed.
  }
  const int signo = stop_signal_.load();
  if (signo == 0 || !absl::IsCancelled(s)) return Fatal(std::string(s.message()));
  std::fprintf(stderr, "meshrun: %s; exiting\n", std::string(s.message()).c_str());
  received_signal_ = signo;
  if (o_.on_stop_signal) o_.on_stop_signal(signo);
  return 128 + signo;
}

NodeAgent::NodeAgent(AgentOptions options) : options_(std::move(options)) {}

int NodeAgent::Run() {
  Session session(options_);
  int code = session.Run();
  received_signal_ = session.received_signal();
  return code;
}

}  // namespace meshrun::agent
