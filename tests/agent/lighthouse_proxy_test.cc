// The node's lighthouse endpoint for torchft (agent/lighthouse/lighthouse_proxy.h)
// in front of a real in-process rendezvous server: torchft's Quorum call is
// forwarded with the run and token, and one that met a server gone away is
// kept and sent again, also when no next leader is ever named; past
// lighthouse_max_calls a call is refused at once.
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

// A torchft client of the endpoint at `address` ("http://HOST:PORT").
std::unique_ptr<torchft::LighthouseService::Stub> Endpoint(const std::string& address) {
  return torchft::LighthouseService::NewStub(
      grpc::CreateChannel(std::string(absl::StripPrefix(address, "http://")), grpc::InsecureChannelCredentials()));
}

// torchft's Quorum call through the endpoint, as its Manager sends it.
grpc::Status AskQuorum(const std::string& address, const std::string& group, std::chrono::seconds timeout,
                       torchft::LighthouseQuorumResponse* resp) {
  auto stub = Endpoint(address);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  torchft::LighthouseQuorumRequest req;
  req.mutable_requester()->set_replica_id(group);
  req.mutable_requester()->set_step(7);
  return stub->Quorum(&ctx, req, resp);
}

// torchft's Heartbeat call through the endpoint.
grpc::Status SendHeartbeat(const std::string& address, const std::string& group) {
  auto stub = Endpoint(address);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  torchft::LighthouseHeartbeatRequest req;
  req.set_replica_id(group);
  torchft::LighthouseHeartbeatResponse resp;
  return stub->Heartbeat(&ctx, req, &resp);
}

// Waits (bounded) until the endpoint holds `n` workers' calls.
bool WaitHeld(const agent::LighthouseProxy& p, int64_t n) {
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (p.calls_held() != n) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
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

TEST_CASE("lighthouse endpoint: past lighthouse_max_calls a worker's call is refused at once, and taken once one ends",
          "[lighthouse]") {
  rendezvous::ServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.token = "secret";
  auto server = rendezvous::RendezvousServer::Start(so);
  REQUIRE(server.ok());
  agent::LighthouseProxyOptions o;
  o.run_id = "job";
  o.token = "secret";
  o.min_replicas = 10;  // No quorum forms: each Quorum call waits for its deadline.
  o.max_calls = 2;
  auto proxy = agent::LighthouseProxy::Start(
      o, grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()), grpc::InsecureChannelCredentials()),
      "node-a");
  REQUIRE(proxy.ok());
  // Two groups wait for a quorum: g0 for 3 s, g1 for 30 s.
  std::promise<grpc::Status> g0_done;
  std::promise<grpc::Status> g1_done;
  std::thread g0([&] {
    torchft::LighthouseQuorumResponse resp;
    g0_done.set_value(AskQuorum((*proxy)->address(), "g0", std::chrono::seconds(3), &resp));
  });
  REQUIRE(WaitHeld(**proxy, 1));
  std::thread g1([&] {
    torchft::LighthouseQuorumResponse resp;
    g1_done.set_value(AskQuorum((*proxy)->address(), "g1", std::chrono::seconds(30), &resp));
  });
  REQUIRE(WaitHeld(**proxy, 2));
  // A third call of either kind: refused at once, naming the limit.
  const absl::Time t0 = absl::Now();
  torchft::LighthouseQuorumResponse resp;
  grpc::Status third = AskQuorum((*proxy)->address(), "g2", std::chrono::seconds(30), &resp);
  const absl::Duration took = absl::Now() - t0;
  INFO(third.error_message() << " (after " << absl::FormatDuration(took) << ")");
  CHECK(third.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(third.error_message() ==
        "the node's lighthouse endpoint holds 2 calls already: Quorum refused (lighthouse_max_calls=2)");
  CHECK(took < absl::Seconds(5));  // Not g2's 30 s deadline.
  grpc::Status beat = SendHeartbeat((*proxy)->address(), "g2");
  CHECK(beat.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(beat.error_message().find("Heartbeat refused (lighthouse_max_calls=2)") != std::string::npos);
  CHECK((*proxy)->calls_held() == 2);  // The refused calls held nothing.
  // g0's deadline passes: its place is free again, and a heartbeat is forwarded.
  auto g0_status = g0_done.get_future();
  REQUIRE(g0_status.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(g0_status.get().error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  g0.join();
  REQUIRE(WaitHeld(**proxy, 1));
  beat = SendHeartbeat((*proxy)->address(), "g2");
  INFO(beat.error_message());
  CHECK(beat.ok());
  // The endpoint's end answers g1 (CANCELLED, within a second) and frees it.
  proxy->reset();
  auto g1_status = g1_done.get_future();
  REQUIRE(g1_status.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(g1_status.get().error_code() != grpc::StatusCode::OK);
  g1.join();
}
