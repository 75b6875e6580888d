// RendezvousClient's replica group placement (meshrun --replica_groups):
// asking the server which group's run this node joins
// (rendezvous/run/replica_group_placer.h), before the membership's calls.
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "client/rdzv_client.h"
#include "client/rdzv_client_internal.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "proto/wire.h"

namespace meshrun::client {

namespace pb = ::meshrun::v1;

absl::StatusOr<std::pair<int, std::string>> RendezvousClient::PlaceReplicaGroup(const std::string& node_id,
                                                                               int replica_groups,
                                                                               int min_nodes_per_group,
                                                                               int max_nodes_per_group,
                                                                               absl::Duration timeout) {
  pb::PlaceReplicaGroupRequest req;
  req.mutable_run()->set_run_id(run_id_);
  req.mutable_run()->set_token(token_);
  req.set_node_id(node_id);
  req.set_replica_groups(replica_groups);
  req.set_min_nodes_per_group(min_nodes_per_group);
  req.set_max_nodes_per_group(max_nodes_per_group);
  pb::PlaceReplicaGroupResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Status s = stubs()->stub->PlaceReplicaGroup(&ctx, req, &resp);
  if (!s.ok()) return rendezvous::wire::FromGrpc(s, absl::StrCat("replica group placement at ", endpoint()));
  return std::make_pair(resp.replica_group(), resp.group_run_id());
}

}  // namespace meshrun::client
