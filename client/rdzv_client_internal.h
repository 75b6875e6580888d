// What rdzv_client.cc, rdzv_watch.cc, rdzv_failover.cc and rdzv_reports.cc
// (the parts of RendezvousClient) share; not part of the client's interface.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "client/channel.h"
#include "client/rdzv_client.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"

namespace meshrun::client {

struct RendezvousClient::Stubs {
  std::unique_ptr<::meshrun::v1::Rendezvous::Stub> stub;
};

// Says in words why a stream to the server broke, for gRPC's transport
// errors ("Socket closed", "recvmsg:No route to host", ...); a message the
// server sent (e.g. why it shut down) is kept as it is.
std::string DescribeLoss(const grpc::Status& s);

// What one replica said when asked (Probe).
enum class Probed { kServes, kStandby, kUnreachable };

// Asks the server on `channel` whether it serves: a heartbeat in `run_id`'s
// name (as `node_id`, with `session`) that any serving server answers (a
// refusal included) and a standby refuses with who leads (*hint); *why is
// what it said. No answer (kUnreachable): UNAVAILABLE, DEADLINE_EXCEEDED,
// and CANCELLED, UNKNOWN or INTERNAL, which come from gRPC (a server
// shutting down cancels new calls), not from the service. Blocks up to 1 s.
Probed Probe(const std::shared_ptr<grpc::Channel>& channel, const std::string& run_id, const std::string& token,
             const std::string& node_id, const std::string& session, std::string* hint, std::string* why);

// How a replica is dialled when looking for the leader: its own
// connection, not waiting for it past `timeout`.
DialOptions ReplicaDial(absl::Duration timeout);

}  // namespace meshrun::client
