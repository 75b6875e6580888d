#include "ft/lighthouse_client.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "meshrun/proto/torchft.grpc.pb.h"

namespace meshrun::mesh::ft {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat(what, ": ", s.error_message()));
}

class GrpcLighthouseClient final : public LighthouseClient {
 public:
  GrpcLighthouseClient(std::string target, std::shared_ptr<grpc::Channel> channel)
      : target_(std::move(target)), stub_(torchft::LighthouseService::NewStub(std::move(channel))) {}

  absl::StatusOr<Quorum> AskQuorum(const Member& me, absl::Duration timeout) override {
    torchft::LighthouseQuorumRequest req;
    torchft::QuorumMember* m = req.mutable_requester();
    m->set_replica_id(me.replica_id);
    m->set_step(me.step);
    m->set_world_size(static_cast<uint64_t>(me.world_size));
    m->set_commit_failures(me.commit_failures);
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {  // Bounded by `deadline`.
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(deadline));
      torchft::LighthouseQuorumResponse resp;
      const grpc::Status s = stub_->Quorum(&ctx, req, &resp);
      if (s.ok()) {
        Quorum q;
        q.quorum_id = resp.quorum().quorum_id();
        for (const torchft::QuorumMember& p : resp.quorum().participants()) {
          q.participants.push_back(
              Member{p.replica_id(), p.step(), static_cast<int64_t>(p.world_size()), p.commit_failures()});
        }
        return q;
      }
      if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED || absl::Now() + absl::Milliseconds(100) >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("no quorum from the lighthouse at ", target_, " within ",
                                                        absl::FormatDuration(timeout), " (last: ",
                                                        s.error_message(), ")"));
      }
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE) {
        return FromGrpc(s, absl::StrCat("quorum from the lighthouse at ", target_));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }

  absl::Status Heartbeat(const std::string& replica_id, absl::Duration timeout) override {
    torchft::LighthouseHeartbeatRequest req;
    req.set_replica_id(replica_id);
    torchft::LighthouseHeartbeatResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return FromGrpc(stub_->Heartbeat(&ctx, req, &resp), absl::StrCat("heartbeat to the lighthouse at ", target_));
  }

 private:
  const std::string target_;
  std::unique_ptr<torchft::LighthouseService::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LighthouseClient>> LighthouseClient::Create(const std::string& address) {
  std::string target = address;
  for (const char* scheme : {"http://", "grpc://"}) {
    if (absl::StartsWith(target, scheme)) target = target.substr(std::char_traits<char>::length(scheme));
  }
  while (!target.empty() && target.back() == '/') target.pop_back();
  if (target.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("lighthouse address '", address,
                                                   "': expected http://host:port (TORCHFT_LIGHTHOUSE)"));
  }
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  return std::unique_ptr<LighthouseClient>(new GrpcLighthouseClient(target, std::move(channel)));
}

}  // namespace meshrun::mesh::ft
