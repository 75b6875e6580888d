#include "common/server_status.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"

namespace meshrun {

absl::StatusOr<std::map<std::string, int64_t>> QueryRequestCounts(const std::string& endpoint,
                                                                  const std::string& token) {
  // One channel per endpoint, kept for the process: repeated queries reuse it.
  static absl::Mutex mu;
  static auto* channels = new std::map<std::string, std::shared_ptr<grpc::Channel>>();
  std::shared_ptr<grpc::Channel> channel;
  {
    absl::MutexLock lock(&mu);
    auto& slot = (*channels)[endpoint];
    if (!slot) slot = grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials());
    channel = slot;
  }
  auto stub = v1::Rendezvous::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::StatusRequest req;
  req.mutable_run()->set_token(token);
  v1::StatusResponse resp;
  grpc::Status s = stub->Status(&ctx, req, &resp);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("status of ", endpoint, ": ", s.error_message()));
  }
  return std::map<std::string, int64_t>(resp.request_counts().begin(), resp.request_counts().end());
}

}  // namespace meshrun
