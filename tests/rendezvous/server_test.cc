// The gRPC server end to end in-process: join, status counters, auth, and a
// waiting call cancelled by its client.
#include <catch2/catch.hpp>

#include "tests/support/grpc_health.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <future>

#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "rendezvous/server.h"
#include "tests/support/server_stubs.h"

using namespace meshrun;
namespace pb = meshrun::v1;

namespace {

std::unique_ptr<meshrun::testing::ServerStubs> Stub(const rendezvous::RendezvousServer& s) {
  return std::make_unique<meshrun::testing::ServerStubs>(
      grpc::CreateChannel(s.endpoint(), grpc::InsecureChannelCredentials()));
}

pb::JoinRequest JoinReq(const std::string& run, const std::string& token) {
  pb::JoinRequest req;
  req.mutable_run()->set_run_id(run);
  req.mutable_run()->set_token(token);
  req.mutable_node()->set_node_id("n1");
  req.mutable_node()->set_addr("127.0.0.1");
  req.mutable_node()->set_nproc(4);
  req.mutable_node()->set_master_port(1234);
  req.mutable_config()->set_min_nodes(1);
  req.mutable_config()->set_max_nodes(1);
  req.set_last_round(-1);
  return req;
}

}  // namespace

TEST_CASE("join over gRPC returns the assignment: status counts requests", "[server]") {
  rendezvous::ServerOptions o;
  o.host = "127.0.0.1";
  auto server = rendezvous::RendezvousServer::Start(o);
  REQUIRE(server.ok());
  CHECK((*server)->port() > 0);
  auto stub = Stub(**server);
  grpc::ClientContext ctx;
  pb::JoinResponse resp;
  REQUIRE(stub->rendezvous->Join(&ctx, JoinReq("job", ""), &resp).ok());
  CHECK(resp.assignment().world_size() == 4);
  CHECK(resp.assignment().master_addr() == "127.0.0.1");
  CHECK(resp.assignment().master_port() == 1234);

  grpc::ClientContext sctx;
  pb::StatusRequest sreq;
  pb::StatusResponse sresp;
  REQUIRE(stub->admin->Status(&sctx, sreq, &sresp).ok());
  CHECK(sresp.request_counts().at("Join") == 1);
  CHECK(sresp.port() == (*server)->port());
  REQUIRE(sresp.runs_size() == 1);
  CHECK(sresp.runs(0).state() == "running");
}

TEST_CASE("a second server cannot bind the same port", "[server]") {
  rendezvous::ServerOptions o;
  o.host = "127.0.0.1";
  auto first = rendezvous::RendezvousServer::Start(o);
  REQUIRE(first.ok());
  o.port = (*first)->port();
  auto second = rendezvous::RendezvousServer::Start(o);
  CHECK(absl::IsAlreadyExists(second.status()));
}

TEST_CASE("with a token, a wrong one gets no assignment", "[server][auth]") {
  rendezvous::ServerOptions o;
  o.host = "127.0.0.1";
  o.token = "tok";
  auto server = rendezvous::RendezvousServer::Start(o);
  REQUIRE(server.ok());
  auto stub = Stub(**server);
  grpc::ClientContext bad;
  pb::JoinResponse resp;
  grpc::Status s = stub->rendezvous->Join(&bad, JoinReq("job", "nope"), &resp);
  CHECK(s.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK_FALSE(resp.has_assignment());
  grpc::ClientContext sctx;
  pb::StatusResponse sresp;
  CHECK(stub->admin->Status(&sctx, pb::StatusRequest(), &sresp).error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(sresp.runs_size() == 0);
  grpc::ClientContext good;
  REQUIRE(stub->rendezvous->Join(&good, JoinReq("job", "tok"), &resp).ok());
  CHECK(resp.assignment().world_size() == 4);
}

TEST_CASE("a parked get is released when its client gives up: shutdown does not hang", "[server]") {
  rendezvous::ServerOptions o;
  o.host = "127.0.0.1";
  auto server = rendezvous::RendezvousServer::Start(o);
  REQUIRE(server.ok());
  auto stub = Stub(**server);
  // The store reads parked in `run`, as the server's status counts them
  // (-1 when it cannot say).
  auto waiters = [&](const std::string& run) -> int64_t {
    grpc::ClientContext sctx;
    pb::StatusRequest sreq;
    sreq.mutable_run()->set_run_id(run);
    pb::StatusResponse sresp;
    if (!stub->admin->Status(&sctx, sreq, &sresp).ok() || sresp.runs_size() != 1) return -1;
    return sresp.runs(0).kv_waiters();
  };
  // Polls (at most 5 s) until `run` has `n` parked reads.
  auto wait_for_waiters = [&](const std::string& run, int64_t n) {
    for (int i = 0; i < 500; ++i) {
      if (waiters(run) == n) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return waiters(run) == n;
  };
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  pb::KvGetRequest req;
  req.mutable_run()->set_run_id("job");
  req.set_key("never");
  req.set_wait_ms(60000);
  pb::KvGetResponse resp;
  auto start = absl::Now();
  grpc::Status s = stub->store->KvGet(&ctx, req, &resp);
  CHECK(s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(absl::Now() - start < absl::Seconds(5));
  // The server let go of it too: no read is left parked in the run.
  CHECK(wait_for_waiters("job", 0));

  // A get parked at shutdown is answered, and shutdown returns promptly.
  req.mutable_run()->set_run_id("job2");
  grpc::ClientContext ctx2;
  pb::KvGetResponse resp2;
  std::atomic<bool> answered{false};
  grpc::Status s2;
  stub->store->async()->KvGet(&ctx2, &req, &resp2, [&](grpc::Status st) {
    s2 = st;
    answered = true;
  });
  // Parked: the server counts it as a waiter of its run. (CHECK, not
  // REQUIRE: the shutdown below must answer the call before its context
  // goes out of scope.)
  CHECK(wait_for_waiters("job2", 1));
  CHECK_FALSE(answered);
  start = absl::Now();
  (*server)->Shutdown(absl::Seconds(2));
  CHECK(absl::Now() - start < absl::Seconds(4));
  for (int i = 0; i < 300 && !answered; ++i) absl::SleepFor(absl::Milliseconds(10));
  CHECK(answered);
  CHECK_FALSE(s2.ok());
}

TEST_CASE("the standard gRPC health service answers SERVING, without the token", "[server][health]") {
  meshrun::rendezvous::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.token = "secret";
  auto server = meshrun::rendezvous::RendezvousServer::Start(o);
  REQUIRE(server.ok());
  std::string target = "127.0.0.1:" + std::to_string((*server)->port());
  meshrun::testing::HealthAnswer whole = meshrun::testing::CheckHealth(target, "");
  CHECK(whole.code == grpc::StatusCode::OK);
  CHECK(whole.status == 1);  // SERVING
  meshrun::testing::HealthAnswer rdzv = meshrun::testing::CheckHealth(target, "meshrun.v1.Rendezvous");
  CHECK(rdzv.code == grpc::StatusCode::OK);
  CHECK(rdzv.status == 1);
  CHECK(meshrun::testing::CheckHealth(target, "no.such.Service").code == grpc::StatusCode::NOT_FOUND);
  (*server)->Shutdown(absl::Seconds(1));
  CHECK(meshrun::testing::CheckHealth(target, "", 1).code != grpc::StatusCode::OK);
}

TEST_CASE("request bytes that do not parse get INVALID_ARGUMENT naming the message, on every method",
          "[server][limits]") {
  meshrun::rendezvous::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.token = "secret";
  auto server = meshrun::rendezvous::RendezvousServer::Start(o);
  REQUIRE(server.ok());
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  // A length-delimited field 1 that claims 100 bytes and has 2: not a message.
  const std::string garbage("\x0a\x64\x01\x02", 4);
  for (const char* method : {"Rendezvous/Join", "Rendezvous/Heartbeat", "Rendezvous/ReportFailure",
                             "Rendezvous/ReportFinished", "Store/KvSet", "Store/KvGet", "Store/KvMultiGet",
                             "Admin/Status"}) {
    grpc::Slice slice(garbage);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, std::string("/meshrun.v1.") + method, grpc::StubOptions(), &request, &response,
                   [&done](grpc::Status s) { done.set_value(s); });
    grpc::Status s = done.get_future().get();
    INFO(method << ": " << s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(s.error_message().find("malformed request: its 4 bytes do not parse as meshrun.v1.") != std::string::npos);
  }
  (*server)->Shutdown(absl::Seconds(1));
}
