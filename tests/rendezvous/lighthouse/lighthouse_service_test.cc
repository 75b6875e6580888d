// The Lighthouse gRPC service in-process: the door's checks, a quorum over
// gRPC, a waiting call's deadline, and shutdown answering a waiting call.
#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <future>
#include <thread>

#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "rendezvous/server.h"
#include "tests/support/server_stubs.h"

using namespace meshrun;
namespace pb = meshrun::v1;

namespace {

struct Fixture {
  std::unique_ptr<rendezvous::RendezvousServer> server;
  std::unique_ptr<testing::ServerStubs> stub;
  explicit Fixture(const std::string& token) {
    rendezvous::ServerOptions o;
    o.host = "127.0.0.1";
    o.token = token;
    auto s = rendezvous::RendezvousServer::Start(o);
    REQUIRE(s.ok());
    server = std::move(*s);
    stub = std::make_unique<testing::ServerStubs>(
        grpc::CreateChannel(server->endpoint(), grpc::InsecureChannelCredentials()));
  }
  grpc::Status Quorum(const std::string& run, const std::string& token, const std::string& group,
                      int64_t min_replicas, std::chrono::milliseconds timeout, pb::LighthouseQuorumResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    pb::LighthouseQuorumRequest req;
    req.mutable_run()->set_run_id(run);
    req.mutable_run()->set_token(token);
    req.mutable_requester()->set_replica_id(group);
    req.mutable_requester()->set_step(5);
    req.mutable_settings()->set_min_replicas(min_replicas);
    return stub->lighthouse->Quorum(&ctx, req, resp);
  }
};

}  // namespace

TEST_CASE("lighthouse over gRPC: the token, the run and the settings are checked, and a quorum answers",
          "[server][lighthouse]") {
  Fixture f("secret");
  pb::LighthouseQuorumResponse resp;
  CHECK(f.Quorum("job", "wrong", "g0", 1, std::chrono::seconds(5), &resp).error_code() ==
        grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status s = f.Quorum("job", "secret", "g0", -1, std::chrono::seconds(5), &resp);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "lighthouse min_replicas=-1: allowed: 0 (the default, 1) or 1..4096 (max_replica_groups)");
  CHECK(f.Quorum("job", "secret", "", 1, std::chrono::seconds(5), &resp).error_code() ==
        grpc::StatusCode::INVALID_ARGUMENT);
  // min_replicas 1: g0 alone is a quorum, id 1.
  REQUIRE(f.Quorum("job", "secret", "g0", 1, std::chrono::seconds(5), &resp).ok());
  CHECK(resp.quorum_id() == 1);
  REQUIRE(resp.participants_size() == 1);
  CHECK(resp.participants(0).replica_id() == "g0");
  CHECK(resp.participants(0).step() == 5);
  CHECK(resp.created_unix_ns() > 0);
  // A run id the server did not have is a store-only run now (a lighthouse
  // jobs share), with its lighthouse in Status.
  grpc::ClientContext ctx;
  pb::StatusRequest sreq;
  sreq.mutable_run()->set_run_id("job");
  sreq.mutable_run()->set_token("secret");
  pb::StatusResponse sresp;
  REQUIRE(f.stub->admin->Status(&ctx, sreq, &sresp).ok());
  REQUIRE(sresp.runs_size() == 1);
  REQUIRE(sresp.lighthouses_size() == 1);
  CHECK(sresp.lighthouses(0).quorum_id() == 1);
  CHECK(sresp.lighthouses(0).quorum_members() == 1);
  // Each member's step at that quorum (meshrun status shows each group's step).
  REQUIRE(sresp.lighthouses(0).member_steps_size() == 1);
  CHECK(sresp.lighthouses(0).member_steps(0).replica_id() == "g0");
  CHECK(sresp.lighthouses(0).member_steps(0).step() == 5);
}

TEST_CASE("lighthouse over gRPC: a call under min_replicas ends at its deadline, and shutdown answers a waiting one",
          "[server][lighthouse]") {
  Fixture f("");
  pb::LighthouseQuorumResponse resp;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(f.Quorum("job", "", "g0", 2, std::chrono::milliseconds(300), &resp).error_code() ==
        grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
  // (g0 stays a candidate of "job"'s next quorum, as in torchft: another
  // run's lighthouse, min_replicas 3, keeps the next call waiting.)
  auto waiting = std::async(std::launch::async, [&] {
    pb::LighthouseQuorumResponse r;
    return f.Quorum("job2", "", "g1", 3, std::chrono::seconds(60), &r);
  });
  // Status shows the call waiting (bounded wait for it to arrive).
  auto parked = [&] {
    grpc::ClientContext ctx;
    pb::StatusRequest req;
    req.mutable_run()->set_run_id("job2");
    pb::StatusResponse resp;
    return f.stub->admin->Status(&ctx, req, &resp).ok() && resp.lighthouses_size() == 1 &&
           resp.lighthouses(0).waiting() == 1;
  };
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!parked() && std::chrono::steady_clock::now() < limit) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(parked());
  const auto t1 = std::chrono::steady_clock::now();
  f.server->Shutdown(absl::Seconds(1), "the test stops the server");
  REQUIRE(waiting.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  grpc::Status s = waiting.get();
  CHECK(s.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(s.error_message() == "the test stops the server");  // Answered by the lighthouse, not by a closed socket.
  CHECK(std::chrono::steady_clock::now() - t1 < std::chrono::seconds(3));
}
