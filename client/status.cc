#include "client/status.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "proto/wire.h"

namespace meshrun::client {

absl::StatusOr<ServerStatus> QueryServerStatus(const Connection& server, const std::string& token,
                                               const std::string& run_id, absl::Duration timeout, bool events) {
  auto stub = v1::Admin::NewStub(server.channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::StatusRequest req;
  req.mutable_run()->set_run_id(run_id);
  req.mutable_run()->set_token(token);
  req.set_events(events);
  v1::StatusResponse resp;
  grpc::Status s = stub->Status(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(absl::StrCat("the rendezvous server at ", server.endpoint,
                                                    " did not answer within ", absl::FormatDuration(timeout)));
  }
  if (!s.ok()) return rendezvous::wire::FromGrpc(s, absl::StrCat("status of ", server.endpoint));
  ServerStatus out;
  out.port = resp.port();
  out.version = resp.version();
  for (const auto& r : resp.runs()) out.runs.push_back(rendezvous::wire::FromProto(r));
  out.request_counts.insert(resp.request_counts().begin(), resp.request_counts().end());
  out.refused_counts.insert(resp.refused_counts().begin(), resp.refused_counts().end());
  out.connections_accepted = resp.connections_accepted();
  out.store_requests_by_node.insert(resp.store_requests_by_node().begin(), resp.store_requests_by_node().end());
  out.store_keys_read_by_node.insert(resp.store_keys_read_by_node().begin(), resp.store_keys_read_by_node().end());
  out.replica_role = resp.replica_role();
  for (const auto& r : resp.replicas()) out.replicas.push_back({r.id(), r.address(), r.leader()});
  out.replica_self = resp.replica_self();
  if (resp.leading_since_unix_ms() > 0) out.leading_since = absl::FromUnixMillis(resp.leading_since_unix_ms());
  for (const auto& l : resp.lighthouses()) {
    ServerStatus::Lighthouse& lh = out.lighthouses.emplace_back();
    lh = {l.run_id(), l.quorum_id(), l.quorum_members(), l.waiting(), l.replica_groups(), l.reason(), {}};
    for (const auto& m : l.member_steps()) lh.member_steps.emplace_back(m.replica_id(), m.step());
  }
  if (!run_id.empty() && out.runs.empty() && out.replica_role != "standby") {
    return absl::NotFoundError(absl::StrCat("the server at ", server.endpoint, " has no run '", run_id, "'"));
  }
  return out;
}

absl::StatusOr<ServerStatus> QueryServerStatus(const std::string& endpoint, const ClientAuth& auth,
                                               const std::string& run_id, absl::Duration timeout, bool events) {
  const absl::Time deadline = absl::Now() + timeout;
  DialOptions o;
  o.timeout = timeout;
  o.wait_for_server = false;
  absl::StatusOr<Connection> c = Dial(endpoint, auth.tls, o);
  if (!c.ok()) return c.status();
  return QueryServerStatus(*c, auth.token, run_id, std::max(absl::Milliseconds(100), deadline - absl::Now()), events);
}

absl::StatusOr<std::map<std::string, int64_t>> QueryRequestCounts(const std::string& endpoint,
                                                                  const std::string& token,
                                                                  const TlsMaterial& tls) {
  absl::StatusOr<ServerStatus> s = QueryServerStatus(endpoint, ClientAuth{token, tls});
  if (!s.ok()) return s.status();
  return std::move(s->request_counts);
}

}  // namespace meshrun::client
