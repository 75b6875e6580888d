// The Store client against a real in-process gRPC server on loopback.
#include <catch2/catch.hpp>

#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/grpc_store.h"
#include "client/status.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "rendezvous/server.h"
#include "tests/support/parked_reads.h"
#include "tests/support/certs.h"

using namespace meshrun;
using meshrun::testing::ParkedReads;
using namespace meshrun::client;

namespace {

std::unique_ptr<rendezvous::RendezvousServer> StartServer(const std::string& token = "") {
  rendezvous::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.token = token;
  auto s = rendezvous::RendezvousServer::Start(o);
  REQUIRE(s.ok());
  return std::move(*s);
}

std::shared_ptr<Store> Connect(const rendezvous::RendezvousServer& server, const std::string& run,
                               int64_t round = 0, const std::string& token = "") {
  GrpcStoreOptions o;
  o.endpoint = server.endpoint();
  o.run_id = run;
  o.round = round;
  o.token = token;
  o.connect_timeout = absl::Seconds(5);
  auto s = ConnectGrpcStore(o);
  REQUIRE(s.ok());
  return *s;
}

}  // namespace

TEST_CASE("store operations round-trip through the server", "[store]") {
  auto server = StartServer();
  auto store = Connect(*server, "job");
  REQUIRE(store->Set("a", std::string("x\0y", 3)).ok());
  auto a = store->Get("a", absl::Seconds(1));
  REQUIRE(a.ok());
  CHECK(*a == std::string("x\0y", 3));
  CHECK(*store->Add("counter", 5) == 5);
  CHECK(*store->Add("counter", -2) == 3);
  CHECK(*store->CompareSet("cas", "", "v1") == "v1");
  CHECK(*store->CompareSet("cas", "wrong", "v2") == "v1");
  CHECK(*store->CompareSet("cas", "v1", "v2") == "v2");
  // Whether this call stored it, apart from the value: a second compare-set
  // to the same value finds it stored by the first and did not swap.
  auto first = store->CompareSwap("swap", "", "same");
  REQUIRE(first.ok());
  CHECK((first->value == "same" && first->swapped));
  auto second = store->CompareSwap("swap", "", "same");
  REQUIRE(second.ok());
  CHECK((second->value == "same" && !second->swapped));
  auto absent = store->CompareSwap("absent", "expected", "new");
  REQUIRE(absent.ok());
  CHECK((absent->value == "expected" && !absent->swapped));  // c10d's answer for an absent key.
  std::vector<std::string> keys = {"k1", "k2"};
  CHECK_FALSE(*store->Check(keys));
  REQUIRE(store->MultiSet(keys, std::vector<std::string>{"1", "2"}).ok());
  CHECK(*store->Check(keys));
  auto values = store->MultiGet(keys, absl::Seconds(1));
  REQUIRE(values.ok());
  CHECK(*values == std::vector<std::string>{"1", "2"});
  CHECK(*store->Delete("k1"));
  CHECK_FALSE(*store->Delete("k1"));
  CHECK(absl::IsNotFound(store->Get("k1", absl::ZeroDuration()).status()));
}

TEST_CASE("a waiting get wakes when another client sets the key", "[store]") {
  auto server = StartServer();
  auto reader = Connect(*server, "job");
  auto writer = Connect(*server, "job");
  // The writer sets the key once the reader's get is parked on the server
  // (its status counts a waiter), and reports on the test's thread.
  absl::Status set = absl::UnknownError("not run");
  bool parked = false;
  std::thread t([&] {
    for (int i = 0; i < 500 && !parked; ++i) {
      parked = ParkedReads(server->endpoint(), "job") == 1;
      if (!parked) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    set = writer->Set("late", "here");
  });
  auto start = absl::Now();
  auto v = reader->Get("late", absl::Seconds(10));
  t.join();
  CHECK(parked);
  REQUIRE(set.ok());
  REQUIRE(v.ok());
  CHECK(*v == "here");
  CHECK(absl::Now() - start < absl::Seconds(5));
}

TEST_CASE("a waiting get times out naming the key", "[store]") {
  auto server = StartServer();
  auto store = Connect(*server, "job");
  auto start = absl::Now();
  auto v = store->Get("never", absl::Milliseconds(200));
  REQUIRE(absl::IsDeadlineExceeded(v.status()));
  CHECK(std::string(v.status().message()).find("never") != std::string::npos);
  CHECK(absl::Now() - start < absl::Seconds(3));
  auto w = store->Wait(std::vector<std::string>{"x", "y"}, absl::Milliseconds(100));
  CHECK(absl::IsDeadlineExceeded(w));
}

TEST_CASE("runs and rounds are isolated scopes", "[store]") {
  auto server = StartServer();
  auto a = Connect(*server, "job-a", 0);
  auto b = Connect(*server, "job-b", 0);
  auto a1 = Connect(*server, "job-a", 1);
  REQUIRE(a->Set("k", "a0").ok());
  CHECK(absl::IsNotFound(b->Get("k", absl::ZeroDuration()).status()));
  CHECK(absl::IsNotFound(a1->Get("k", absl::ZeroDuration()).status()));
  PrefixStore prefixed("mesh", a);
  REQUIRE(prefixed.Set("k", "p").ok());
  CHECK(*a->Get("mesh/k", absl::ZeroDuration()) == "p");
}

TEST_CASE("a wrong or missing token gets nothing", "[store][auth]") {
  auto server = StartServer("s3cret");
  auto good = Connect(*server, "job", 0, "s3cret");
  REQUIRE(good->Set("k", "v").ok());
  for (const std::string token : {"", "wrong"}) {
    auto bad = Connect(*server, "job", 0, token);
    auto v = bad->Get("k", absl::ZeroDuration());
    REQUIRE(v.status().code() == absl::StatusCode::kUnauthenticated);
    CHECK(bad->Set("k", "evil").code() == absl::StatusCode::kUnauthenticated);
  }
  CHECK(*good->Get("k", absl::ZeroDuration()) == "v");
}

TEST_CASE("set-then-multi-get publishes and reads in one request", "[store]") {
  auto server = StartServer();
  auto a = Connect(*server, "exchange");
  auto b = std::make_shared<PrefixStore>("p", Connect(*server, "exchange"));
  auto c = std::make_shared<PrefixStore>("p", Connect(*server, "exchange"));
  absl::StatusOr<std::vector<std::string>> got_b, got_c;
  std::thread tb([&] {
    got_b = b->SetThenMultiGet(std::vector<std::string>{"b"}, std::vector<std::string>{"2"},
                               std::vector<std::string>{"c"}, absl::Seconds(10));
  });
  got_c = c->SetThenMultiGet(std::vector<std::string>{"c", "c2"}, std::vector<std::string>{"3", "4"},
                             std::vector<std::string>{"b", "c2"}, absl::Seconds(10));
  tb.join();
  REQUIRE(got_b.ok());
  REQUIRE(got_c.ok());
  CHECK(*got_b == std::vector<std::string>{"3"});
  CHECK(*got_c == std::vector<std::string>{"2", "4"});
  CHECK(*a->Get("p/b", absl::ZeroDuration()) == "2");
  auto counts = QueryRequestCounts(server->endpoint(), "");
  REQUIRE(counts.ok());
  CHECK((*counts)["KvMultiGet"] == 2);
  CHECK((*counts)["KvMultiSet"] == 0);
  auto bad = a->SetThenMultiGet(std::vector<std::string>{"x"}, std::vector<std::string>{}, {}, absl::Seconds(1));
  CHECK(absl::IsInvalidArgument(bad.status()));
  auto late = a->SetThenMultiGet({}, {}, std::vector<std::string>{"never"}, absl::Milliseconds(200));
  CHECK(absl::IsDeadlineExceeded(late.status()));
}

TEST_CASE("a store that does not wait for the connection reaches the server on its first call", "[store]") {
  auto server = StartServer();
  GrpcStoreOptions o;
  o.endpoint = server->endpoint();
  o.run_id = "lazy";
  o.wait_for_connection = false;
  auto store = ConnectGrpcStore(o);
  REQUIRE(store.ok());
  CHECK((*store)->Set("k", "v").ok());
  CHECK(*(*store)->Get("k", absl::Seconds(1)) == "v");
}

TEST_CASE("a store that does not wait for the connection fails UNAVAILABLE naming an unreachable server",
          "[store]") {
  GrpcStoreOptions o;
  o.endpoint = "127.0.0.1:1";  // nothing listens on port 1
  o.run_id = "lazy";
  o.wait_for_connection = false;
  o.rpc_slack = absl::Milliseconds(300);
  auto store = ConnectGrpcStore(o);
  REQUIRE(store.ok());  // returns at once
  const absl::Time start = absl::Now();
  auto v = (*store)->Get("k", absl::Milliseconds(200));
  CHECK(absl::Now() - start < absl::Seconds(5));
  CHECK(absl::IsUnavailable(v.status()));
  CHECK(v.status().message().find("rendezvous store at 127.0.0.1:1 is unreachable") != absl::string_view::npos);
}

TEST_CASE("the store and the status query over mutual TLS, and a client that does not match is told why", "[store][tls]") {
  meshrun::testing::TestCerts certs;
  REQUIRE(certs.ok());
  auto load = [&](const std::string& cert, const std::string& key, const std::string& ca) {
    auto m = LoadTls(TlsFiles{cert.empty() ? "" : certs.Path(cert), key.empty() ? "" : certs.Path(key),
                              ca.empty() ? "" : certs.Path(ca)});
    REQUIRE(m.ok());
    return *m;
  };
  rendezvous::ServerOptions so;
  so.host = "127.0.0.1";
  so.tls = load("host.crt", "host.key", "ca.crt");
  auto server = rendezvous::RendezvousServer::Start(so);
  REQUIRE(server.ok());
  const std::string endpoint = (*server)->endpoint();  // 127.0.0.1:port, in the certificate's SAN.

  GrpcStoreOptions o;
  o.endpoint = endpoint;
  o.run_id = "tls";
  o.connect_timeout = absl::Seconds(5);
  o.tls = load("host.crt", "host.key", "ca.crt");
  auto store = ConnectGrpcStore(o);
  REQUIRE(store.ok());
  CHECK((*store)->Set("k", "v").ok());
  CHECK(*(*store)->Get("k", absl::Seconds(1)) == "v");
  auto counts = QueryRequestCounts(endpoint, "", o.tls);
  REQUIRE(counts.ok());
  CHECK((*counts)["KvSet"] == 1);

  // A plain status query: the server speaks TLS.
  auto plain = QueryRequestCounts(endpoint, "");
  REQUIRE_FALSE(plain.ok());
  CHECK(absl::StrContains(plain.status().message(), "speaks TLS and this node does not (set MESHRUN_TLS_CA"));
  // A store client without its certificate under mutual TLS.
  GrpcStoreOptions no_cert = o;
  no_cert.tls = load("", "", "ca.crt");
  no_cert.connect_timeout = absl::Seconds(2);
  auto refused = ConnectGrpcStore(no_cert);
  REQUIRE_FALSE(refused.ok());
  CHECK(absl::StrContains(refused.status().message(), "the server requires a client certificate (mutual TLS"));
  // A client trusting another CA.
  GrpcStoreOptions wrong_ca = o;
  wrong_ca.tls = load("other.crt", "other.key", "otherca.crt");
  wrong_ca.connect_timeout = absl::Seconds(2);
  auto untrusted = ConnectGrpcStore(wrong_ca);
  REQUIRE_FALSE(untrusted.ok());
  INFO(untrusted.status().message());
  CHECK(absl::StrContains(untrusted.status().message(), "the server's certificate failed verification ("));
  CHECK(absl::StrContains(untrusted.status().message(),
                          "): it is not signed by the CA in MESHRUN_TLS_CA=" + certs.Path("otherca.crt")));
}
