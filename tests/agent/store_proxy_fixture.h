// The store proxy's test fixture (agent/store_proxy/store_proxy.h): a real
// in-process rendezvous server with a token, the proxy in front of it over
// the agent's kind of channel, and the workers' store client (GrpcStore
// over the proxy's Unix socket).
#pragma once

#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "agent/store_proxy/store_proxy.h"
#include "client/grpc_store.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "rendezvous/server.h"

namespace meshrun::testing::store_proxy {

using namespace meshrun::client;

// A store client straight to the server at `endpoint` (not through a
// proxy), in run `run`'s name with the fixture's token: what the server
// itself holds.
inline std::shared_ptr<Store> ServerStore(const std::string& endpoint, const std::string& run = "job") {
  GrpcStoreOptions o;
  o.endpoint = endpoint;
  o.run_id = run;
  o.token = "s3cret";
  auto s = ConnectGrpcStore(o);
  REQUIRE(s.ok());
  return *s;
}

struct Setup {
  std::unique_ptr<rendezvous::RendezvousServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<agent::StoreProxy> proxy;

  explicit Setup(agent::StoreProxyOptions o = {}) {
    rendezvous::ServerOptions so;
    so.host = "127.0.0.1";
    so.token = "s3cret";
    auto s = rendezvous::RendezvousServer::Start(so);
    REQUIRE(s.ok());
    server = std::move(*s);
    // As the agent's channel (client/rdzv_client.cc): it carries the proxy's reads.
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxStoreAnswerBytes);
    channel = grpc::CreateCustomChannel(server->endpoint(), grpc::InsecureChannelCredentials(), args);
    if (o.run_id.empty()) o.run_id = "job";
    o.token = "s3cret";
    auto p = agent::StoreProxy::Start(o, channel, "node-a");
    REQUIRE(p.ok());
    proxy = std::move(*p);
    proxy->SetRound(0);
  }

  std::shared_ptr<Store> Worker(const std::string& run = "job", int64_t round = 0) const {
    GrpcStoreOptions o;
    o.endpoint = proxy->endpoint();
    o.run_id = run;
    o.round = round;
    o.connect_timeout = absl::Seconds(5);
    auto s = ConnectGrpcStore(o);
    REQUIRE(s.ok());
    return *s;
  }

  // The server's Status: of every run, or of run `run_id` only.
  v1::StatusResponse ServerStatus(const std::string& run_id = "") const {
    auto stub = v1::Admin::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::StatusRequest req;
    req.mutable_run()->set_token("s3cret");
    req.mutable_run()->set_run_id(run_id);
    v1::StatusResponse resp;
    REQUIRE(stub->Status(&ctx, req, &resp).ok());
    return resp;
  }
};

}  // namespace meshrun::testing::store_proxy
