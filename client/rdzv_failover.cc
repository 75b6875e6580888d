// RendezvousClient's failover between replicas of the rendezvous server
// (docs/etcd.md): finding the leader among the endpoints, and what the
// client's calls do when the one they were on stops leading.
#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "client/rdzv_client.h"
#include "client/rdzv_client_internal.h"
#include "common/logging.h"
#include "common/standby.h"

namespace meshrun::client {

namespace pb = ::meshrun::v1;

Probed Probe(const std::shared_ptr<grpc::Channel>& channel, const std::string& run_id, const std::string& token,
             const std::string& node_id, const std::string& session, std::string* hint, std::string* why) {
  auto stub = pb::Rendezvous::NewStub(channel);
  pb::HeartbeatRequest req;
  req.mutable_run()->set_run_id(run_id);
  req.mutable_run()->set_token(token);
  req.set_node_id(node_id.empty() ? std::string("meshrun-probe") : node_id);
  req.set_session(session);
  req.set_round(-1);
  pb::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  grpc::Status s = stub->Heartbeat(&ctx, req, &resp);
  if (ParseStandbyDetail(s.error_details(), hint)) {
    *why = s.error_message();
    return Probed::kStandby;
  }
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    // Not cancelled here: gRPC cancels a call that reaches a server while
    // it shuts down (a replica stopped by SIGTERM, whose stream ending
    // started this search). Neither that nor a transport's own error is
    // an answer of the service.
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::INTERNAL:
      *why = DescribeLoss(s);
      return Probed::kUnreachable;
    default:
      return Probed::kServes;
  }
}

DialOptions ReplicaDial(absl::Duration timeout) {
  DialOptions o;
  o.timeout = timeout;
  o.wait_for_server = false;
  o.channel.own_connection = true;
  o.channel.keepalive_time = RendezvousClient::kKeepaliveTime;
  o.channel.keepalive_timeout = RendezvousClient::kKeepaliveTimeout;
  return o;
}

absl::Status RendezvousClient::FailOver(const std::string& why, absl::Time deadline) {
  const absl::Time start = absl::Now();
  std::string hint, session, old;
  {
    absl::MutexLock lock(&mu_);
    hint = std::exchange(failover_hint_, "");
    failover_why_.clear();
    failover_wanted_ = false;
    session = session_;
    old = endpoint_;
  }
  Logger("agent")->warn("rendezvous server at {}: {}; looking for the leader among {}", old, why,
                        absl::StrJoin(endpoints_, ","));
  std::vector<std::string> last(endpoints_.size());
  // Bounded: by the deadline, and by the count (a sweep takes at least 200 ms).
  for (int sweep = 0; sweep < 100000 && absl::Now() < deadline; ++sweep) {
    std::vector<std::string> order;
    if (!hint.empty()) order.push_back(hint);
    for (const std::string& e : endpoints_) {
      if (e != hint) order.push_back(e);
    }
    hint.clear();
    for (size_t i = 0; i < order.size(); ++i) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return absl::CancelledError("stopped");
      }
      const std::string ep = order[i];
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) break;
      DialOptions dial = ReplicaDial(std::min(absl::Seconds(1), left));
      dial.tls_name = tls_name_;
      absl::StatusOr<Connection> c = Dial(ep, tls_, dial);
      std::string said;
      Probed p = Probed::kUnreachable;
      if (!c.ok()) {
        said = std::string(c.status().message());
      } else {
        std::string leader;
        p = Probe(c->channel, run_id_, token_, watch_node_id_, session, &leader, &said);
        if (p == Probed::kStandby && !leader.empty() && leader != ep) {
          // Ask the leader it names next.
          auto next = order.begin() + static_cast<std::ptrdiff_t>(i) + 1;
          auto it = std::find(next, order.end(), leader);
          if (it == order.end()) {
            order.insert(next, leader);
          } else {
            std::rotate(next, it, it + 1);
          }
        }
      }
      for (size_t k = 0; k < endpoints_.size(); ++k) {
        if (endpoints_[k] == ep) last[k] = said;
      }
      if (p != Probed::kServes) continue;
      std::function<void(std::shared_ptr<grpc::Channel>)> on_change;
      {
        absl::MutexLock lock(&mu_);
        endpoint_ = ep;
        channel_ = c->channel;
        stubs_ = std::make_shared<Stubs>(Stubs{pb::Rendezvous::NewStub(channel_)});
        server_lost_.clear();
        last_answer_ = absl::Now();
        missed_heartbeats_ = 0;
        failover_wanted_ = false;
        // A node never assigned is new to the next leader (a join waiting
        // for its round is not kept in etcd): its stream opens as a new
        // node's, and the join sent again there takes that credential.
        if (!has_assignment_) {
          session_.clear();
          watch_opening_ = true;
        }
        on_change = on_leader_change_;
      }
      if (on_change) on_change(c->channel);
      const int64_t ms = absl::ToInt64Milliseconds(absl::Now() - start);
      Logger("agent")->warn("following the rendezvous leader at {} (failover {} ms)", ep, ms);
      return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  std::vector<std::string> said;
  for (size_t k = 0; k < endpoints_.size(); ++k) said.push_back(absl::StrCat(endpoints_[k], ": ", last[k]));
  return absl::UnavailableError(absl::StrCat(
      "no rendezvous server replica leads after ",
      absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(100))), " (",
      absl::StrJoin(said, "; "), ")"));
}

grpc::Status RendezvousClient::HeartbeatAmongReplicas(grpc::ClientContext* ctx, const pb::HeartbeatRequest& req,
                                                    pb::HeartbeatResponse* resp) {
  const std::string current = endpoint();
  grpc::Status s;
  absl::Notification done;
  stubs()->stub->async()->Heartbeat(ctx, &req, resp, [&](grpc::Status st) {
    s = std::move(st);
    done.Notify();
  });
  if (done.WaitForNotificationWithTimeout(kMinHeartbeatWait)) return s;
  bool cancelled = false;
  if (std::string other = OtherLeader(current, req.node_id()); !other.empty() && !done.HasBeenNotified()) {
    RequestFailover(other, absl::StrCat("no answer for ", absl::FormatDuration(kMinHeartbeatWait),
                                        ", and the replica at ", other, " leads"));
    ctx->TryCancel();
    cancelled = true;
  }
  done.WaitForNotification();  // Bounded by the call's deadline.
  // Cancelled here: counted as unanswered, not as an answer.
  if (cancelled && s.error_code() == grpc::StatusCode::CANCELLED) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no answer; another replica leads");
  }
  return s;
}

std::string RendezvousClient::OtherLeader(const std::string& current, const std::string& node_id) {
  std::string session;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (stopping_ || now - last_other_leader_search_ < kOtherLeaderPause) return "";
    last_other_leader_search_ = now;
    session = session_;
  }
  for (const std::string& ep : endpoints_) {  // Bounded: each endpoint once.
    if (ep == current) continue;
    DialOptions dial = ReplicaDial(absl::Seconds(1));
    dial.tls_name = tls_name_;
    absl::StatusOr<Connection> c = Dial(ep, tls_, dial);
    if (!c.ok()) continue;
    std::string leader, why;
    if (Probe(c->channel, run_id_, token_, node_id, session, &leader, &why) == Probed::kServes) return ep;
  }
  return "";
}

void RendezvousClient::RequestFailover(const std::string& leader, const std::string& why) {
  // The server this client uses stands by now (it lost its lease): the
  // event stream fails over (StartWatch), to the leader it names first.
  absl::MutexLock lock(&mu_);
  if (!failover_wanted_ && !stopping_) {
    failover_wanted_ = true;
    failover_hint_ = leader;
    failover_why_ = why;
    if (watch_ctx_) watch_ctx_->TryCancel();
  }
}

bool RendezvousClient::WaitForNextLeader(const grpc::Status& s, const std::shared_ptr<Stubs>& on,
                                         absl::Time deadline, bool cancelled_is_lost) {
  if (endpoints_.size() <= 1) return false;
  std::string leader;
  const bool standby = ParseStandbyDetail(s.error_details(), &leader);
  const bool lost = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                    (cancelled_is_lost && s.error_code() == grpc::StatusCode::CANCELLED);
  if (!standby && !lost) return false;
  if (standby) RequestFailover(leader);
  absl::MutexLock lock(&mu_);
  auto moved = [this, &on]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || stubs_ != on; };
  return mu_.AwaitWithDeadline(absl::Condition(&moved), deadline) && !stopping_;
}

}  // namespace meshrun::client
