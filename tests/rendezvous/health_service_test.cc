// grpc.health.v1 as the server serves it (rendezvous/grpc/health_service.h):
// Check open to anyone, Watch only with the token on a token server,
// bounded, following changes (a replica's gate too), ended by the server's
// shutdown.
#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>

#include "meshrun/proto/health.grpc.pb.h"
#include "rendezvous/server.h"
#include "rendezvous/state/serving_gate.h"

namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

struct Stream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader;
};

std::unique_ptr<Stream> OpenWatch(Health::Stub& stub, const std::string& service, const std::string& bearer) {
  auto s = std::make_unique<Stream>();
  s->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  if (!bearer.empty()) s->ctx.AddMetadata("authorization", "Bearer " + bearer);
  HealthCheckRequest req;
  req.set_service(service);
  s->reader = stub.Watch(&s->ctx, req);
  return s;
}

}  // namespace

TEST_CASE("health Watch needs the token on a token server, is bounded, and ends at shutdown", "[server][health]") {
  meshrun::rendezvous::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.token = "secret";
  o.limits.max_health_watchers = 2;
  auto server = meshrun::rendezvous::RendezvousServer::Start(o);
  REQUIRE(server.ok());
  auto stub = Health::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));

  // Check: open, no token.
  {
    grpc::ClientContext ctx;
    HealthCheckRequest req;
    HealthCheckResponse resp;
    REQUIRE(stub->Check(&ctx, req, &resp).ok());
    CHECK(resp.status() == HealthCheckResponse::SERVING);
  }
  // Watch without the token, or with a wrong one: UNAUTHENTICATED, nothing sent.
  for (const std::string& bearer : {std::string(), std::string("wrong")}) {
    auto w = OpenWatch(*stub, "", bearer);
    HealthCheckResponse r;
    CHECK_FALSE(w->reader->Read(&r));
    grpc::Status s = w->reader->Finish();
    CHECK(s.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK(s.error_message().find("authorization: Bearer <token>") != std::string::npos);
  }
  // With the token: the status now; max_health_watchers=2 streams at once.
  auto a = OpenWatch(*stub, "", "secret");
  auto b = OpenWatch(*stub, "meshrun.v1.Rendezvous", "secret");
  HealthCheckResponse r;
  REQUIRE(a->reader->Read(&r));
  CHECK(r.status() == HealthCheckResponse::SERVING);
  REQUIRE(b->reader->Read(&r));
  CHECK(r.status() == HealthCheckResponse::SERVING);
  auto c = OpenWatch(*stub, "", "secret");
  CHECK_FALSE(c->reader->Read(&r));
  grpc::Status third = c->reader->Finish();
  CHECK(third.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(third.error_message().find("max_health_watchers=2") != std::string::npos);

  // Shutdown: NOT_SERVING, then the stream ends (it does not hold the shutdown's grace).
  const absl::Time start = absl::Now();
  (*server)->Shutdown(absl::Seconds(5), "shutting down for the test");
  CHECK(absl::Now() - start < absl::Seconds(4));
  bool saw_not_serving = false;
  while (a->reader->Read(&r)) saw_not_serving = saw_not_serving || r.status() == HealthCheckResponse::NOT_SERVING;
  CHECK(saw_not_serving);
  CHECK(a->reader->Finish().error_code() == grpc::StatusCode::UNAVAILABLE);
  while (b->reader->Read(&r)) {
  }
  CHECK_FALSE(b->reader->Finish().ok());
}

TEST_CASE("health Watch on a server without a token ends after connection_idle_timeout", "[server][health]") {
  meshrun::rendezvous::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.limits.connection_idle_timeout = absl::Seconds(1);
  auto server = meshrun::rendezvous::RendezvousServer::Start(o);
  REQUIRE(server.ok());
  auto stub = Health::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));
  const absl::Time start = absl::Now();
  auto v = OpenWatch(*stub, "", "");  // Bounded by its 20 s deadline.
  HealthCheckResponse r;
  REQUIRE(v->reader->Read(&r));
  CHECK(r.status() == HealthCheckResponse::SERVING);
  // Nothing more is sent; the server ends the stream (no unauthenticated
  // stream keeps a connection from counting as idle).
  while (v->reader->Read(&r)) {
  }
  grpc::Status s = v->reader->Finish();
  const absl::Duration took = absl::Now() - start;
  CHECK(s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(s.error_message().find("connection_idle_timeout") != std::string::npos);
  CHECK(took >= absl::Seconds(1));
  CHECK(took < absl::Seconds(8));
  (*server)->Shutdown(absl::Seconds(1), "test over");
}

namespace {

HealthCheckResponse::ServingStatus CheckOf(Health::Stub& stub, const std::string& service,
                                           grpc::StatusCode* code = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  grpc::Status s = stub.Check(&ctx, req, &resp);
  if (code != nullptr) *code = s.error_code();
  return s.ok() ? resp.status() : HealthCheckResponse::UNKNOWN;
}

}  // namespace

// gRPC's health-checking convention: "" is the whole server (a standby
// replica is up: it answers Status and stands ready to lead), and each
// service answers for itself. A replica's gate refuses Rendezvous and Store
// calls while it stands by or is paused, so those two follow it.
TEST_CASE("health answers for Rendezvous, Store and Admin, and Rendezvous and Store follow a replica's gate",
          "[server][health]") {
  meshrun::rendezvous::state::ServingGate gate;  // Closed: a standby.
  meshrun::rendezvous::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.token = "secret";
  o.gate = &gate;
  auto server = meshrun::rendezvous::RendezvousServer::Start(o);
  REQUIRE(server.ok());
  auto stub = Health::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));
  const std::string rdzv = "meshrun.v1.Rendezvous", store = "meshrun.v1.Store", admin = "meshrun.v1.Admin";
  CHECK(CheckOf(*stub, "") == HealthCheckResponse::SERVING);
  CHECK(CheckOf(*stub, admin) == HealthCheckResponse::SERVING);
  CHECK(CheckOf(*stub, rdzv) == HealthCheckResponse::NOT_SERVING);
  CHECK(CheckOf(*stub, store) == HealthCheckResponse::NOT_SERVING);
  grpc::StatusCode code = grpc::StatusCode::OK;
  CheckOf(*stub, "meshrun.v1.Nothing", &code);
  CHECK(code == grpc::StatusCode::NOT_FOUND);

  // A Watch of the store sees the gate open (leading) and close (paused).
  auto w = OpenWatch(*stub, store, "secret");
  HealthCheckResponse r;
  REQUIRE(w->reader->Read(&r));
  CHECK(r.status() == HealthCheckResponse::NOT_SERVING);
  gate.SetServing(true);
  REQUIRE(w->reader->Read(&r));
  CHECK(r.status() == HealthCheckResponse::SERVING);
  CHECK(CheckOf(*stub, rdzv) == HealthCheckResponse::SERVING);
  CHECK(CheckOf(*stub, store) == HealthCheckResponse::SERVING);
  gate.SetPaused("etcd lost its quorum");
  gate.SetServing(false);
  REQUIRE(w->reader->Read(&r));
  CHECK(r.status() == HealthCheckResponse::NOT_SERVING);
  CHECK(CheckOf(*stub, rdzv) == HealthCheckResponse::NOT_SERVING);
  CHECK(CheckOf(*stub, "") == HealthCheckResponse::SERVING);
  CHECK(CheckOf(*stub, admin) == HealthCheckResponse::SERVING);

  // Shutdown: everything NOT_SERVING, and a gate opening afterwards changes nothing.
  (*server)->Shutdown(absl::Seconds(5), "test over");
  gate.SetServing(true);
  while (w->reader->Read(&r)) CHECK(r.status() == HealthCheckResponse::NOT_SERVING);
  CHECK_FALSE(w->reader->Finish().ok());
}

TEST_CASE("health on a server without replicas: Rendezvous, Store and Admin answer like the server", "[server][health]") {
  meshrun::rendezvous::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  auto server = meshrun::rendezvous::RendezvousServer::Start(o);
  REQUIRE(server.ok());
  auto stub = Health::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));
  for (const std::string service : {"", "meshrun.v1.Rendezvous", "meshrun.v1.Store", "meshrun.v1.Admin"}) {
    INFO(service);
    CHECK(CheckOf(*stub, service) == HealthCheckResponse::SERVING);
  }
  (*server)->Shutdown(absl::Seconds(1), "test over");
}
