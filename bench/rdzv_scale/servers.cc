#include "bench/rdzv_scale/servers.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/rdzv_scale/driver.h"

namespace meshrun::bench {

absl::StatusOr<std::unique_ptr<Servers>> Servers::Start(const ServersOptions& o) {
  auto s = std::unique_ptr<Servers>(new Servers());
  if (o.etcd) {
    auto members = EtcdMembers::Start(o.etcd_member_script, o.log_prefix + "-etcd");
    if (!members.ok()) return absl::UnavailableError(absl::StrCat("etcd: ", members.status().message()));
    s->etcd_ = std::move(*members);
  }
  const int count = o.etcd ? 3 : 1;
  for (int i = 0; i < count; ++i) {
    std::vector<std::string> args = o.server_args;
    if (o.etcd) {
      args.insert(args.end(), {"--state", s->etcd_->Url(i, o.state_prefix), "--state_lease_ttl",
                               absl::StrCat(o.state_lease_ttl_s), "--state_local_member", o.state_local_member});
    }
    auto server = ServerProcess::Start(o.meshrun_binary, args,
                                       absl::StrCat(o.log_prefix, o.etcd ? absl::StrCat("-r", i) : "", ".log"),
                                       absl::Seconds(o.etcd ? 60 : 20));
    if (!server.ok()) return server.status();
    TrackProcessGroup((*server)->pid());  // Its own group (agent::Spawn).
    s->tracked_.push_back((*server)->pid());
    s->servers_.push_back(std::move(*server));
  }
  if (o.etcd) {
    s->leader_ = s->LeaderAmong(-1, absl::Seconds(30));
    if (s->leader_ < 0) return absl::UnavailableError("etcd: no replica led within 30 s");
  }
  return s;
}

Servers::~Servers() {
  servers_.clear();  // Each stops its process.
  for (pid_t p : tracked_) UntrackProcessGroup(p);
  etcd_.reset();
}

std::string Servers::endpoints() const {
  std::vector<std::string> out;
  for (const auto& sp : servers_) out.push_back(sp->endpoint());
  return absl::StrJoin(out, ",");
}

int Servers::LeaderAmong(int except, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (int sweep = 0; sweep < 100000; ++sweep) {
    for (int i = 0; i < static_cast<int>(servers_.size()); ++i) {
      // Every replica prints "meshrun server: leading (...)" when it leads.
      if (i != except && servers_[i]->pid() > 0 &&
          servers_[i]->Printed("meshrun server: leading", absl::ZeroDuration())) {
        return i;
      }
    }
    if (absl::Now() > deadline) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return -1;
}

void Servers::KillLeaderHost() {
  if (!etcd_) return;
  leader().Kill();
  etcd_->Kill(leader_);
}

bool Servers::AwaitNextLeader(absl::Duration timeout) {
  const int next = LeaderAmong(leader_, timeout);
  if (next < 0) return false;
  leader_ = next;
  return true;
}

}  // namespace meshrun::bench
