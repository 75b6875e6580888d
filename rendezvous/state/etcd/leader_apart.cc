#include "rendezvous/state/etcd/leader_apart.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/net.h"

namespace meshrun::rendezvous::state::etcd {

absl::StatusOr<std::optional<Endpoint>> LocalMember(const std::string& flag, const std::vector<Endpoint>& members) {
  if (flag == "none") return std::optional<Endpoint>();
  if (flag.empty() || flag == "auto") {
    for (const Endpoint& m : members) {
      if (IsLocalHost(m.host)) return std::optional<Endpoint>(m);
    }
    return std::optional<Endpoint>();
  }
  std::vector<std::string> names;
  for (const Endpoint& m : members) {
    if (m.ToString() == flag) return std::optional<Endpoint>(m);
    names.push_back(m.ToString());
  }
  return absl::InvalidArgumentError(absl::StrCat("--state_local_member=", flag,
                                                 " is not one of --state's members; allowed: auto, none, or one of ",
                                                 absl::StrJoin(names, ", ")));
}

LeaderApart::LeaderApart(Client* client, std::optional<Endpoint> local, absl::Duration interval)
    : client_(client), local_(std::move(local)), interval_(std::max(interval, absl::Milliseconds(100))) {}

LeaderApart::Outcome LeaderApart::Check(bool force) {
  if (!local_ || refused_) return Outcome::kIdle;
  const absl::Time now = absl::Now();
  const absl::Duration wait = std::min(interval_ * (1 << std::min(failures_, 10)), std::max(interval_, absl::Minutes(1)));
  if (!force && now - last_check_ < wait) return Outcome::kIdle;
  last_check_ = now;
  Outcome out = CheckNow();
  failures_ = out == Outcome::kFailed ? failures_ + 1 : 0;
  return out;
}

LeaderApart::Outcome LeaderApart::CheckNow() {
  absl::StatusOr<MemberStatus> mine = client_->StatusOf(*local_);
  if (!mine.ok()) return Failed(mine.status());
  if (mine->leader == 0 || mine->leader != mine->member_id) return Outcome::kApart;
  absl::StatusOr<std::vector<MemberInfo>> members = client_->MemberList();
  if (!members.ok()) return Failed(members.status());
  // A transferee: a voting member that answers (through this client) and
  // follows the same leader; when none does and another is not one of this
  // client's members (it advertises other names), the first such one none
  // of whose addresses failed (never a member seen dead).
  uint64_t unchecked = 0;
  std::string unchecked_name;
  bool others = false;
  for (const MemberInfo& m : *members) {
    if (m.id == mine->member_id || m.is_learner) continue;
    others = true;
    bool failed = false;   // One of its addresses is this client's and did not do.
    bool unknown = false;  // One of its addresses is not this client's.
    for (const std::string& url : m.client_urls) {
      std::string hostport = url;
      if (size_t scheme = hostport.find("://"); scheme != std::string::npos) hostport = hostport.substr(scheme + 3);
      absl::StatusOr<Endpoint> ep = ParseEndpoint(hostport, 0);
      if (!ep.ok()) continue;
      absl::StatusOr<MemberStatus> other = client_->StatusOf(*ep);
      if (!other.ok()) {
        (other.status().code() == absl::StatusCode::kInvalidArgument ? unknown : failed) = true;
        continue;
      }
      if (!other->errors.empty() || other->leader != mine->member_id) {
        failed = true;
        continue;
      }
      return Move(m.id, m.name);
    }
    if (unknown && !failed && unchecked == 0) {
      unchecked = m.id;
      unchecked_name = m.name;
    }
  }
  if (!others) return Outcome::kAlone;
  if (unchecked != 0) return Move(unchecked, unchecked_name);
  return Failed(absl::UnavailableError("no other etcd member to hand etcd's leadership to answers"));
}

LeaderApart::Outcome LeaderApart::Failed(const absl::Status& s) {
  const absl::Time now = absl::Now();
  if (s.code() == absl::StatusCode::kPermissionDenied) {
    refused_ = true;
    Logger("rdzv")->warn(
        "etcd refused to move its leader off this replica's host ({}); a failover that loses etcd's leader too "
        "takes about 1.5 s longer (give --state_user etcd's root role, or --state_local_member=none to not ask)",
        std::string(s.message()));
  } else if (now - last_failure_log_ >= absl::Minutes(1)) {
    last_failure_log_ = now;
    Logger("rdzv")->info("cannot check or move etcd's leader yet: {}", std::string(s.message()));
  }
  return Outcome::kFailed;
}

LeaderApart::Outcome LeaderApart::Move(uint64_t transferee, const std::string& name) {
  if (absl::Status s = client_->MoveLeader(*local_, transferee); !s.ok()) return Failed(s);
  Logger("rdzv")->info(
      "moved etcd's leader from {} (this replica's host) to member {}: one host's loss no longer costs both "
      "elections",
      local_->ToString(), name);
  return Outcome::kMoved;
}

}  // namespace meshrun::rendezvous::state::etcd
