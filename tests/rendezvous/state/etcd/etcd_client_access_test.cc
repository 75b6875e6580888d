// Reaching etcd with the etcd client (rendezvous/state/etcd/client/etcd_client.h),
// against real etcd clusters started by tests/support/etcd_cluster.h: an
// unreachable --state, TLS mismatches, and etcd's authentication.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "common/net.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "rendezvous/state/etcd/client/etcd_client.h"
#include "tests/rendezvous/state/etcd/etcd_test_util.h"
#include "tests/support/certs.h"
#include "tests/support/etcd_cluster.h"

using meshrun::testing::EtcdCluster;
using meshrun::testing::EtcdClusterOptions;
using meshrun::testing::Mentions;
using meshrun::testing::OneLine;
using meshrun::testing::SecondsSince;
using meshrun::testing::TestClient;
using meshrun::testing::TestClientOptions;
using meshrun::testing::WaitFor;
using meshrun::testing::WatchLog;
namespace etcd = meshrun::rendezvous::state::etcd;
using Clock = std::chrono::steady_clock;

TEST_CASE("etcd: an unreachable --state fails fast with one line naming every member", "[etcd]") {
  etcd::ClientOptions o;
  std::vector<int> ports;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<int> p = meshrun::FindFreePort("127.0.0.1");
    REQUIRE(p.ok());
    o.members.push_back(meshrun::Endpoint{"127.0.0.1", *p});
  }
  o.members.push_back(meshrun::Endpoint{"no-such-host.invalid", 2379});
  auto client = TestClient(o);
  REQUIRE(client != nullptr);
  const auto t0 = Clock::now();
  absl::Status s = client->Connect();
  const double took = SecondsSince(t0);
  std::printf("etcd unreachable (%.3f s): %s\n", took, std::string(s.message()).c_str());
  INFO(s.message() << " (" << took << " s)");
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  CHECK(Mentions(s, "etcd unreachable: connect: no member answered"));
  for (int i = 0; i < 3; ++i) CHECK(Mentions(s, o.members[i].ToString() + ": Connection refused"));
  CHECK(Mentions(s, "no-such-host.invalid"));
  CHECK(OneLine(s));
  if (meshrun::testing::kEtcdTimingBounds) CHECK(took < 2.0);
  // A write fails the same way, and as fast.
  const auto t1 = Clock::now();
  absl::Status put = client->Put("/x", "1").status();
  CHECK(Mentions(put, "etcd unreachable: Put /x: no member answered"));
  if (meshrun::testing::kEtcdTimingBounds) CHECK(SecondsSince(t1) < 2.0);
}

TEST_CASE("etcd: TLS mismatches are named in one line", "[etcd]") {
  MESHRUN_REQUIRE_ETCD();
  meshrun::testing::TestCerts certs;
  REQUIRE(certs.ok());
  EtcdClusterOptions tls_opts;
  tls_opts.members = 1;
  tls_opts.tls_dir = certs.dir();
  tls_opts.client_cert_auth = true;
  EtcdCluster tls_cluster(tls_opts);
  REQUIRE_MSG(tls_cluster.Start(), tls_cluster.error());
  EtcdClusterOptions plain_opts;
  plain_opts.members = 1;
  EtcdCluster plain_cluster(plain_opts);
  REQUIRE_MSG(plain_cluster.Start(), plain_cluster.error());

  auto connect = [](const etcd::ClientOptions& o) {
    auto c = TestClient(o);
    REQUIRE(c != nullptr);
    const auto t0 = Clock::now();
    absl::Status s = c->Connect();
    std::printf("etcd TLS: %s\n", std::string(s.message()).c_str());
    INFO(s.message());
    CHECK(OneLine(s));
    if (meshrun::testing::kEtcdTimingBounds) CHECK(SecondsSince(t0) < 4.0);
    return s;
  };
  auto tls_material = [&](const std::string& ca, const std::string& cert, const std::string& key) {
    meshrun::TlsFiles f;
    f.ca = ca.empty() ? "" : certs.Path(ca);
    f.cert = cert.empty() ? "" : certs.Path(cert);
    f.key = key.empty() ? "" : certs.Path(key);
    absl::StatusOr<meshrun::TlsMaterial> m = meshrun::LoadTls(f);
    REQUIRE(m.ok());
    return *m;
  };

  // A plain client, etcd speaks TLS.
  etcd::ClientOptions plain = TestClientOptions(tls_cluster);
  absl::Status s = connect(plain);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Mentions(s, "etcd " + tls_cluster.ClientAddress(0) + ": TLS mismatch: the member speaks TLS but the --state "
                    "URL is etcd://: use etcds:// with --state_tls_ca"));
  // TLS without the client certificate etcd requires.
  etcd::ClientOptions no_cert = TestClientOptions(tls_cluster);
  no_cert.use_tls = true;
  no_cert.tls = tls_material("ca.crt", "", "");
  s = connect(no_cert);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Mentions(s, "requires a client certificate (etcd's --client-cert-auth): set --state_tls_cert"));
  // etcd's certificate is not signed by the CA given.
  etcd::ClientOptions wrong_ca = no_cert;
  wrong_ca.tls = tls_material("otherca.crt", "host.crt", "host.key");
  s = connect(wrong_ca);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Mentions(s, "failed verification"));
  CHECK(Mentions(s, "--state_tls_ca=" + certs.Path("otherca.crt")));
  // A client certificate etcd does not trust.
  etcd::ClientOptions wrong_cert = no_cert;
  wrong_cert.tls = tls_material("ca.crt", "other.crt", "other.key");
  s = connect(wrong_cert);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Mentions(s, "refused the client certificate --state_tls_cert=" + certs.Path("other.crt")));
  // All right: it works.
  etcd::ClientOptions good = no_cert;
  good.tls = tls_material("ca.crt", "host.crt", "host.key");
  auto c = TestClient(good);
  REQUIRE(c != nullptr);
  REQUIRE(c->Connect().ok());
  REQUIRE(c->Put("/tls/x", "1").ok());
  CHECK(c->Get("/tls/x")->kvs.at(0).value == "1");
  // TLS asked of a plain etcd.
  etcd::ClientOptions tls_to_plain = TestClientOptions(plain_cluster);
  tls_to_plain.use_tls = true;
  tls_to_plain.tls = tls_material("ca.crt", "", "");
  s = connect(tls_to_plain);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Mentions(s, "the member does not speak TLS but the --state URL is etcds://"));
  // etcd's auth asked of an etcd without it.
  etcd::ClientOptions auth_to_plain = TestClientOptions(plain_cluster);
  auth_to_plain.user = "meshrun";
  auth_to_plain.password = "pw";
  s = connect(auth_to_plain);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Mentions(s, "--state_user='meshrun' is set but etcd's authentication is not enabled"));
}

TEST_CASE("etcd: authentication refused, missing, denied, and renewed when its token expires", "[etcd]") {
  MESHRUN_REQUIRE_ETCD();
  if (EtcdCluster::EtcdctlBinary().empty()) MESHRUN_SKIP("etcdctl is not installed (Debian's etcd-client)");
  EtcdClusterOptions opts;
  opts.members = 1;
  opts.extra_flags = {"--auth-token-ttl", "1"};  // Tokens expire after 1 s unused.
  EtcdCluster cluster(opts);
  REQUIRE_MSG(cluster.Start(), cluster.error());
  REQUIRE_MSG(cluster.EnableAuth("rootpw", "meshrun", "pw", "/meshrun/"), cluster.error());

  etcd::ClientOptions wrong = TestClientOptions(cluster);
  wrong.user = "meshrun";
  wrong.password = "not-it";
  absl::Status s = TestClient(wrong)->Connect();
  INFO(s.message());
  CHECK(s.code() == absl::StatusCode::kUnauthenticated);
  CHECK(Mentions(s, "etcd " + cluster.ClientAddress(0) +
                        ": authentication refused for user 'meshrun': invalid user or password (check --state_user "
                        "and --state_password_file)"));
  CHECK(OneLine(s));

  etcd::ClientOptions none = TestClientOptions(cluster);
  s = TestClient(none)->Put("/meshrun/x", "1").status();
  CHECK(s.code() == absl::StatusCode::kUnauthenticated);
  CHECK(Mentions(s, "etcd has authentication enabled and no user was given: set --state_user"));

  etcd::ClientOptions right = TestClientOptions(cluster);
  right.user = "meshrun";
  right.password = "pw";
  auto client = TestClient(right);
  REQUIRE(client->Connect().ok());
  REQUIRE(client->Put("/meshrun/x", "1").ok());
  s = client->Put("/elsewhere", "1").status();
  CHECK(s.code() == absl::StatusCode::kPermissionDenied);
  CHECK(Mentions(s, "permission denied for user 'meshrun'"));

  // A watch with the token.
  WatchLog log;
  etcd::WatchOptions wo;
  wo.range_end = etcd::PrefixEnd("/meshrun/");
  std::unique_ptr<etcd::Watcher> w = client->Watch("/meshrun/", wo, log.Callbacks());
  REQUIRE(WaitFor([&] { return w->next_revision() != 0; }, 5));
  REQUIRE(client->Put("/meshrun/y", "2").ok());
  REQUIRE(WaitFor([&] { return log.count() == 1; }, 5));

  // The token expires (--auth-token-ttl 1): shown with a token of our own,
  // then the client's next call authenticates again by itself.
  auto channel = grpc::CreateChannel(cluster.ClientAddress(0), grpc::InsecureChannelCredentials());
  auto auth = etcdserverpb::Auth::NewStub(channel);
  auto kv = etcdserverpb::KV::NewStub(channel);
  etcdserverpb::AuthenticateRequest areq;
  areq.set_name("meshrun");
  areq.set_password("pw");
  etcdserverpb::AuthenticateResponse aresp;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    REQUIRE(auth->Authenticate(&ctx, areq, &aresp).ok());
  }
  // Waiting out the token's TTL (the expiry is what is tested).
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ctx.AddMetadata("token", aresp.token());
    etcdserverpb::RangeRequest rreq;
    rreq.set_key("/meshrun/x");
    etcdserverpb::RangeResponse rresp;
    grpc::Status expired = kv->Range(&ctx, rreq, &rresp);
    CHECK(expired.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK(expired.error_message() == "etcdserver: invalid auth token");
  }
  absl::StatusOr<etcd::RangeResult> after = client->Get("/meshrun/x");
  REQUIRE_MSG(after.ok(), after.status().message());
  CHECK(after->kvs.at(0).value == "1");
}
