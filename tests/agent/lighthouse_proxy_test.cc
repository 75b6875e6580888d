// The node's lighthouse endpoint for torchft (agent/lighthouse/lighthouse_proxy.h)
// in front of a real in-process rendezvous server: torchft's Quorum call is
// forwarded with the run and token, and one that met a server gone away is
// kept and sent again, also when no next leader is ever named.
#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "agent/lighthouse/lighthouse_proxy.h"
#include "meshrun/proto/torchft.grpc.pb.h"
#include "rendezvous/server.h"
#include "tests/support/dead_port.h"

using namespace meshrun;

namespace {

// torchft's Quorum call through the endpoint, as its Manager sends it.
grpc::Status AskQuorum(const std::string& address, const std::string& group, std::chrono::seconds timeout,
                       torchft::LighthouseQuorumResponse* resp) {
  auto stub = torchft::LighthouseService::NewStub(grpc::CreateChannel(
      std::string(absl::StripPrefix(address, "http://")), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  torchft::LighthouseQuorumRequest req;
  req.mutable_requester()->set_replica_id(group);
  req.mutable_requester()->set_step(7);
  return stub->Quorum(&ctx, req, resp);
}

}  // namespace

TEST_CASE("lighthouse endpoint: a Quorum call kept on the leader the agent follows is sent there again when it serves",
          "[lighthouse]") {
  // The leader the agent follows answers UNAVAILABLE (nothing listens on its port yet, as a
  // replica elected but not serving) and no other leader will be named: the kept call must
  // reach it once it serves, not wait for a leader change that never comes.
  const int port = testing::DeadPort();
  REQUIRE(port > 0);
  grpc::ChannelArguments fast = testing::FastReconnect();
  agent::LighthouseProxyOptions o;
  o.run_id = "job";
  o.token = "secret";
  o.min_replicas = 1;
  o.kept_retry_ms = 200;
  auto proxy = agent::LighthouseProxy::Start(
      o, grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), fast),
      "node-a");
  REQUIRE(proxy.ok());
  (*proxy)->SetFollowLeader(true);
  std::promise<std::pair<grpc::Status, torchft::LighthouseQuorumResponse>> asked;
  std::thread group([&] {
    torchft::LighthouseQuorumResponse resp;
    grpc::Status s = AskQuorum((*proxy)->address(), "g0", std::chrono::seconds(20), &resp);
    asked.set_value({s, resp});
  });
  absl::SleepFor(absl::Milliseconds(300));  // Kept by now (and sent again at least once).
  rendezvous::ServerOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  so.token = "secret";
  auto server = rendezvous::RendezvousServer::Start(so);
  REQUIRE(server.ok());
  const absl::Time served = absl::Now();
  auto done = asked.get_future();
  // Bounded: the call's own deadline is 20 s.
  REQUIRE(done.wait_for(std::chrono::seconds(8)) == std::future_status::ready);
  const absl::Duration took = absl::Now() - served;
  group.join();
  auto [status, resp] = done.get();
  INFO(status.error_message() << "; answered " << absl::FormatDuration(took) << " after the leader served");
  REQUIRE(status.ok());
  REQUIRE(resp.quorum().participants_size() == 1);
  CHECK(resp.quorum().participants(0).replica_id() == "g0");
  CHECK(resp.quorum().participants(0).step() == 7);
  CHECK(took < absl::Seconds(5));
}
