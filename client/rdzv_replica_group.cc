// RendezvousClient's replica group placement (meshrun --replica_groups):
// asking the server which group's run this node joins
// (rendezvous/run/replica_group_placer.h), before the membership's calls,
// and how the job's groups stand (for --min_replica_groups and its end).
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

absl::StatusOr<std::vector<rendezvous::ReplicaGroupState>> RendezvousClient::ReplicaGroupStates(
    const std::string& job_run_id, int replica_groups, absl::Duration timeout) {
  pb::ReplicaGroupStatesRequest req;
  req.mutable_run()->set_run_id(job_run_id);
  req.mutable_run()->set_token(token_);
  req.set_replica_groups(replica_groups);
  pb::ReplicaGroupStatesResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Status s = stubs()->stub->ReplicaGroupStates(&ctx, req, &resp);
  if (!s.ok()) return rendezvous::wire::FromGrpc(s, absl::StrCat("replica group states at ", endpoint()));
  std::vector<rendezvous::ReplicaGroupState> out;
  out.reserve(static_cast<size_t>(resp.groups_size()));
  for (const pb::ReplicaGroupStatus& g : resp.groups()) out.push_back(rendezvous::wire::FromProto(g));
  return out;
}

}  // namespace meshrun::client
