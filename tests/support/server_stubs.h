// The rendezvous server's three gRPC services (Rendezvous: membership;
// Store: the key-value store; Admin: status, replicas) on one channel, for
// tests that speak to the server directly. Header-only.
#pragma once

#include <memory>

#include <grpcpp/grpcpp.h>

#include "meshrun/proto/rendezvous.grpc.pb.h"

namespace meshrun::testing {

struct ServerStubs {
  explicit ServerStubs(const std::shared_ptr<grpc::Channel>& channel)
      : rendezvous(v1::Rendezvous::NewStub(channel)),
        store(v1::Store::NewStub(channel)),
        admin(v1::Admin::NewStub(channel)),
        lighthouse(v1::Lighthouse::NewStub(channel)) {}
  std::unique_ptr<v1::Rendezvous::Stub> rendezvous;
  std::unique_ptr<v1::Store::Stub> store;
  std::unique_ptr<v1::Admin::Stub> admin;
  std::unique_ptr<v1::Lighthouse::Stub> lighthouse;
};

}  // namespace meshrun::testing
