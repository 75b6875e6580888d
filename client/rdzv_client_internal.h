// What rdzv_client.cc and rdzv_watch.cc (the two halves of
// RendezvousClient) share; not part of the client's interface.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

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

}  // namespace meshrun::client
