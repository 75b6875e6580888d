#include "rendezvous/status_client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "proto/wire.h"

namespace meshrun::rendezvous {

absl::StatusOr<ServerStatus> QueryServerStatus(const std::string& endpoint, const std::string& token,
                                               const std::string& run_id, absl::Duration timeout) {
  auto stub = v1::Rendezvous::NewStub(grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  ctx.set_wait_for_ready(true);  // Wait for the connection up to the deadline.
  v1::StatusRequest req;
  req.mutable_run()->set_run_id(run_id);
  req.mutable_run()->set_token(token);
  v1::StatusResponse resp;
  grpc::Status s = stub->Status(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::UnavailableError(absl::StrCat("no rendezvous server answered at ", endpoint, " within ",
                                               absl::FormatDuration(timeout)));
  }
  if (!s.ok()) return wire::FromGrpc(s, absl::StrCat("status of ", endpoint));
  ServerStatus out;
  out.port = resp.port();
  out.version = resp.version();
  for (const auto& r : resp.runs()) out.runs.push_back(wire::FromProto(r));
  if (!run_id.empty() && out.runs.empty()) {
    return absl::NotFoundError(absl::StrCat("the server at ", endpoint, " has no run '", run_id, "'"));
  }
  return out;
}

}  // namespace meshrun::rendezvous
