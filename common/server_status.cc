#include "common/server_status.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/endpoint.h"
#include "common/grpc_tls.h"
#include "common/net.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"

namespace meshrun {

absl::StatusOr<std::map<std::string, int64_t>> QueryRequestCounts(const std::string& endpoint,
                                                                  const std::string& token,
                                                                  const TlsMaterial& tls) {
  // One channel per endpoint, kept for the process: repeated queries reuse it.
  static absl::Mutex mu;
  static auto* channels = new std::map<std::string, std::shared_ptr<grpc::Channel>>();
  std::shared_ptr<grpc::Channel> channel;
  {
    absl::MutexLock lock(&mu);
    auto& slot = (*channels)[absl::StrCat(endpoint, "\n", tls.files.cert, "\n", tls.files.key, "\n", tls.files.ca)];
    if (!slot) slot = grpc::CreateChannel(endpoint, ClientCredentials(tls));
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
    std::string cause;
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      absl::StatusOr<Endpoint> ep = ParseEndpoint(endpoint, 29400);
      absl::StatusOr<std::vector<std::string>> addrs =
          ep.ok() ? ResolveNumeric(ep->host) : absl::StatusOr<std::vector<std::string>>(ep.status());
      if (addrs.ok() && !addrs->empty()) cause = ProbeTlsMismatch(ep->host, addrs->front(), ep->port, tls, absl::Seconds(5));
    }
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        cause.empty() ? absl::StrCat("status of ", endpoint, ": ", s.error_message())
                                      : absl::StrCat("status of ", endpoint, ": ", cause));
  }
  return std::map<std::string, int64_t>(resp.request_counts().begin(), resp.request_counts().end());
}

}  // namespace meshrun
