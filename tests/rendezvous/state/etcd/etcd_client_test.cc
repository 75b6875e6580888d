// The etcd client (rendezvous/state/etcd/client/etcd_client.h) against real etcd
// clusters started by tests/support/etcd_cluster.h: KV and transactions,
// etcd's limits, fail-over and watches across kill -9 of members, leases and
// quorum loss. Reaching etcd (an unreachable --state, TLS, etcd's auth):
// etcd_client_access_test.cc.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include <vector>

#include "common/net.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "rendezvous/state/etcd/client/etcd_client.h"
#include "tests/rendezvous/state/etcd/etcd_test_util.h"
#include "tests/support/certs.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/subprocess.h"

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

namespace {

// What a lease keeper's callbacks said, and when.
struct LossLog {
  std::mutex mu;
  bool lost = false;
  int unconfirmed = 0;
  int confirmed = 0;
  absl::Status why;  // Of the last on_lost or on_unconfirmed.
  Clock::time_point at;
  etcd::LeaseCallbacks Callbacks() {
    etcd::LeaseCallbacks cb;
    cb.on_lost = [this](const absl::Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      lost = true;
      why = s;
      at = Clock::now();
    };
    cb.on_unconfirmed = [this](const absl::Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      ++unconfirmed;
      why = s;
      at = Clock::now();
    };
    cb.on_confirmed = [this] {
      std::lock_guard<std::mutex> lock(mu);
      ++confirmed;
    };
    return cb;
  }
  bool Lost() {
    std::lock_guard<std::mutex> lock(mu);
    return lost;
  }
  int Unconfirmed() {
    std::lock_guard<std::mutex> lock(mu);
    return unconfirmed;
  }
  int Confirmed() {
    std::lock_guard<std::mutex> lock(mu);
    return confirmed;
  }
};

// Creates `key` with `value` the way a caller of the client writes across
// fail-overs: with a compare that makes the write safe to repeat (only if
// absent), repeated while its outcome is unknown (OutcomeUnknown). OK when
// the key holds `value` in the end; `unknown` counts the repeats.
absl::Status CreateEventually(etcd::Client& c, const std::string& key, const std::string& value, int* unknown) {
  etcd::Txn t;
  t.compare = {etcd::Compare::Absent(key)};
  t.success = {etcd::Op::Put(key, value)};
  t.failure = {etcd::Op::Get(key)};
  absl::Status last;
  // Bounded: 3 unknown outcomes, or 20 s without an elected leader (right
  // after its leader was killed, etcd elects another; a loaded machine can
  // take seconds).
  const auto t0 = Clock::now();
  for (int attempt = 0; attempt < 3;) {
    absl::StatusOr<etcd::TxnResult> r = c.Transact(t);
    if (r.ok()) {
      if (r->succeeded) return absl::OkStatus();
      // An earlier try was applied.
      const auto& kvs = r->results.at(0).range.kvs;
      return !kvs.empty() && kvs[0].value == value ? absl::OkStatus() : absl::InternalError("another value");
    }
    last = r.status();
    if (absl::StrContains(last.message(), "no leader") && SecondsSince(t0) < 20) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (!etcd::OutcomeUnknown(last)) return last;
    ++*unknown;
    ++attempt;
  }
  return last;
}

std::string Key(int i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%02d", i);
  return buf;
}

}  // namespace

TEST_CASE("etcd: KV, transactions, pagination and etcd's limits on a 3-member cluster", "[etcd]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  etcd::ClientOptions options = TestClientOptions(cluster);
  // Every call is told (the server's meshrun_etcd_requests_total): its kind and outcome.
  std::mutex calls_mu;
  std::vector<std::string> calls;
  options.on_call = [&](const std::string& op, absl::StatusCode code, absl::Duration took) {
    std::lock_guard<std::mutex> lock(calls_mu);
    calls.push_back(absl::StrCat(op, " ", absl::StatusCodeToString(code), took >= absl::ZeroDuration() ? "" : " (<0)"));
  };
  auto client = TestClient(options);
  REQUIRE(client != nullptr);
  REQUIRE(client->Connect().ok());

  absl::StatusOr<etcd::PutResult> p1 = client->Put("/t/a", "1");
  REQUIRE(p1.ok());
  CHECK(p1->revision > 0);
  absl::StatusOr<etcd::RangeResult> g = client->Get("/t/a");
  REQUIRE(g.ok());
  {
    std::lock_guard<std::mutex> lock(calls_mu);
    CHECK(calls == std::vector<std::string>{"connect OK", "Put OK", "Range OK"});
  }
  REQUIRE(g->kvs.size() == 1);
  CHECK(g->kvs[0].value == "1");
  CHECK(g->kvs[0].create_revision == p1->revision);
  CHECK(g->kvs[0].version == 1);
  absl::StatusOr<etcd::PutResult> p2 = client->Put("/t/a", "2", 0, /*prev_kv=*/true);
  REQUIRE(p2.ok());
  CHECK(p2->has_prev);
  CHECK(p2->prev.value == "1");
  CHECK(client->Get("/t/missing")->kvs.empty());

  // A prefix read in pages.
  for (int i = 0; i < 10; ++i) REQUIRE(client->Put("/t/p/" + Key(i), std::to_string(i)).ok());
  std::vector<std::string> seen;
  etcd::RangeOptions page;
  page.limit = 4;
  page.range_end = etcd::PrefixEnd("/t/p/");
  std::string from = "/t/p/";
  for (int pages = 0; pages < 10; ++pages) {
    absl::StatusOr<etcd::RangeResult> r = client->Get(from, page);
    REQUIRE(r.ok());
    for (const auto& kv : r->kvs) seen.push_back(kv.key);
    if (!r->more) break;
    CHECK(r->kvs.size() == 4);
    from = r->kvs.back().key + std::string(1, '\0');
  }
  REQUIRE(seen.size() == 10);
  for (int i = 0; i < 10; ++i) CHECK(seen[i] == "/t/p/" + Key(i));
  etcd::RangeOptions count;
  count.count_only = true;
  CHECK(client->GetPrefix("/t/p/", count)->count == 10);

  // Every compare target, both branches, a nested Txn.
  absl::StatusOr<etcd::Lease> lease = client->LeaseGrant(30);
  REQUIRE(lease.ok());
  REQUIRE(client->Put("/t/l", "x", lease->id).ok());
  etcd::Txn t;
  using R = etcd::Compare::Result;
  t.compare = {etcd::Compare::Value("/t/a", R::kEqual, "2"), etcd::Compare::Version("/t/a", R::kEqual, 2),
               etcd::Compare::CreateRevision("/t/a", R::kEqual, p1->revision),
               etcd::Compare::ModRevision("/t/a", R::kEqual, p2->revision),
               etcd::Compare::Lease("/t/l", R::kEqual, lease->id), etcd::Compare::Absent("/t/b")};
  t.success = {etcd::Op::Put("/t/b", "b"), etcd::Op::Get("/t/a")};
  t.failure = {etcd::Op::Get("/t/a")};
  absl::StatusOr<etcd::TxnResult> tr = client->Transact(t);
  REQUIRE(tr.ok());
  CHECK(tr->succeeded);
  REQUIRE(tr->results.size() == 2);
  CHECK(tr->results[0].kind == etcd::Op::Kind::kPut);
  CHECK(tr->results[1].range.kvs.at(0).value == "2");
  // The same again: /t/b exists now, so the failure branch runs.
  absl::StatusOr<etcd::TxnResult> tr2 = client->Transact(t);
  REQUIRE(tr2.ok());
  CHECK_FALSE(tr2->succeeded);
  CHECK(tr2->results.at(0).range.kvs.at(0).value == "2");
  etcd::Txn inner;
  inner.compare = {etcd::Compare::Absent("/t/n")};
  inner.success = {etcd::Op::Put("/t/n", "n")};
  etcd::Txn outer;
  outer.success = {etcd::Op::Nested(inner)};
  absl::StatusOr<etcd::TxnResult> nested = client->Transact(outer);
  REQUIRE(nested.ok());
  REQUIRE(nested->results.size() == 1);
  REQUIRE(nested->results[0].txn != nullptr);
  CHECK(nested->results[0].txn->succeeded);
  CHECK(client->Get("/t/n")->kvs.at(0).value == "n");

  absl::StatusOr<etcd::DeleteResult> d = client->Delete("/t/a");
  REQUIRE(d.ok());
  CHECK(d->deleted == 1);
  CHECK(client->DeletePrefix("/t/p/")->deleted == 10);
  CHECK(client->Get("/t/a")->kvs.empty());

  // etcd's limits: 128 ops in a Txn pass, 129 are refused with one line.
  etcd::Txn big;
  for (int i = 0; i < 128; ++i) big.success.push_back(etcd::Op::Put("/t/big/" + std::to_string(i), "v"));
  absl::StatusOr<etcd::TxnResult> ok128 = client->Transact(big);
  REQUIRE(ok128.ok());
  CHECK(ok128->results.size() == 128);
  big.success.push_back(etcd::Op::Put("/t/big/128", "v"));
  absl::StatusOr<etcd::TxnResult> no129 = client->Transact(big);
  REQUIRE_FALSE(no129.ok());
  INFO(no129.status().message());
  CHECK(no129.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(Mentions(no129.status(), "129 operations"));
  CHECK(Mentions(no129.status(), "--max-txn-ops"));
  CHECK(Mentions(no129.status(), "etcd 127.0.0.1:"));
  CHECK(OneLine(no129.status()));
  // Requests above --max-request-bytes (1.5 MiB): etcd's own refusal below
  // its gRPC limit (2 MiB), gRPC's above it; one message for both.
  for (size_t bytes : {size_t{1600} << 10, size_t{3} << 20}) {
    absl::StatusOr<etcd::PutResult> large = client->Put("/t/large", std::string(bytes, 'x'));
    REQUIRE_FALSE(large.ok());
    INFO(large.status().message());
    CHECK(large.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK(Mentions(large.status(), "--max-request-bytes"));
    CHECK(OneLine(large.status()));
  }
  etcd::Txn dup;
  dup.success = {etcd::Op::Put("/t/d", "1"), etcd::Op::Put("/t/d", "2")};
  absl::StatusOr<etcd::TxnResult> dupr = client->Transact(dup);
  CHECK(dupr.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Mentions(dupr.status(), "duplicate key"));

  absl::StatusOr<std::vector<etcd::MemberInfo>> members = client->MemberList();
  REQUIRE(members.ok());
  CHECK(members->size() == 3);
  for (const auto& ep : client->options().members) {
    absl::StatusOr<etcd::MemberStatus> st = client->StatusOf(ep);
    REQUIRE(st.ok());
    CHECK(st->leader != 0);
    CHECK(st->version.rfind("3.", 0) == 0);
  }
}

TEST_CASE("etcd: calls and watches fail over when a member is killed (kill -9)", "[etcd]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  auto client = TestClient(TestClientOptions(cluster, {0, 1, 2}));
  REQUIRE(client != nullptr);
  absl::StatusOr<etcd::PutResult> first = client->Put("/w/" + Key(0), "0");
  REQUIRE(first.ok());
  CHECK(client->current_member() == cluster.ClientAddress(0));

  // A prefix watch from a past revision: it starts with the first put.
  WatchLog log;
  etcd::WatchOptions wo;
  wo.range_end = etcd::PrefixEnd("/w/");
  wo.start_revision = first->revision;
  wo.prev_kv = true;
  std::unique_ptr<etcd::Watcher> watcher = client->Watch("/w/", wo, log.Callbacks());
  for (int i = 1; i < 3; ++i) REQUIRE(client->Put("/w/" + Key(i), std::to_string(i)).ok());
  REQUIRE(WaitFor([&] { return log.count() == 3; }, 10));

  // kill -9 of the member the client and the watch talk to. Reads move to
  // the next member at once; a write sent to the dead member in the moment
  // before the client noticed reports its outcome unknown, and is repeated
  // safely (CreateEventually).
  cluster.Kill(0);
  const auto t0 = Clock::now();
  absl::StatusOr<etcd::RangeResult> read = client->Get("/w/" + Key(2));
  const double failover_s = SecondsSince(t0);
  REQUIRE_MSG(read.ok(), read.status().message());
  CHECK(read->kvs.at(0).value == "2");
  CHECK(client->current_member() != cluster.ClientAddress(0));
  std::printf("etcd fail-over: the first Get after kill -9 of its member took %.3f s\n", failover_s);
  if (meshrun::testing::kEtcdTimingBounds) CHECK(failover_s < 3.0);
  // Writes need etcd's leader: when the killed member led, wait for the
  // state of an elected one (a loaded machine can take seconds to elect).
  REQUIRE_MSG(cluster.WaitHealthy(20, {1, 2}), cluster.error());
  int unknown = 0;
  for (int i = 3; i < 8; ++i) {
    absl::Status s = CreateEventually(*client, "/w/" + Key(i), std::to_string(i), &unknown);
    REQUIRE_MSG(s.ok(), s.message());
  }
  CHECK(client->Get("/w/" + Key(7))->kvs.at(0).value == "7");

  // The member comes back; then another goes: calls and the watch carry on.
  REQUIRE(cluster.Restart(0));
  REQUIRE_MSG(cluster.WaitHealthy(20), cluster.error());
  cluster.Kill(1);
  REQUIRE_MSG(cluster.WaitHealthy(20, {0, 2}), cluster.error());
  for (int i = 8; i < 10; ++i) {
    absl::Status s = CreateEventually(*client, "/w/" + Key(i), std::to_string(i), &unknown);
    REQUIRE_MSG(s.ok(), s.message());
  }
  etcd::Txn del;
  del.success = {etcd::Op::Delete("/w/" + Key(0))};
  absl::StatusOr<etcd::TxnResult> deleted;
  for (int attempt = 0; attempt < 3; ++attempt) {  // Deleting twice deletes once.
    deleted = client->Transact(del);
    if (deleted.ok() || !etcd::OutcomeUnknown(deleted.status())) break;
    ++unknown;
  }
  REQUIRE_MSG(deleted.ok(), deleted.status().message());
  std::printf("etcd fail-over: %d write(s) of unknown outcome repeated\n", unknown);

  // Every event once, in order, across the re-established streams.
  REQUIRE(WaitFor([&] { return log.count() >= 11; }, 15));
  watcher->Cancel();
  std::lock_guard<std::mutex> lock(log.mu);
  REQUIRE(log.events.size() == 11);
  for (int i = 0; i < 10; ++i) {
    CHECK(log.events[i].type == etcd::WatchEvent::Type::kPut);
    CHECK(log.events[i].kv.key == "/w/" + Key(i));
    if (i > 0) CHECK(log.events[i].kv.mod_revision > log.events[i - 1].kv.mod_revision);
  }
  CHECK(log.events[10].type == etcd::WatchEvent::Type::kDelete);
  CHECK(log.events[10].has_prev);
  CHECK(log.events[10].prev.value == "0");
  // The watch said it broke, and that it was re-established.
  bool broke = false;
  bool reestablished = false;
  for (const auto& s : log.statuses) {
    if (!s.status.ok()) broke = true;
    if (broke && s.status.ok()) reestablished = true;
    CHECK_FALSE(s.final);
  }
  CHECK(broke);
  CHECK(reestablished);
}

TEST_CASE("etcd: leases are kept alive, a revoke is reported, and quorum loss fails every call in time", "[etcd]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;  // --election-timeout=500: leases of 1 s.
  REQUIRE_MSG(cluster.Start(), cluster.error());
  etcd::ClientOptions o = TestClientOptions(cluster, {0, 1, 2});
  auto client = TestClient(o);
  auto admin = TestClient(TestClientOptions(cluster, {1, 2, 0}));
  REQUIRE(client != nullptr);
  REQUIRE(admin != nullptr);

  // Kept alive for three TTLs.
  LossLog held;
  absl::StatusOr<std::unique_ptr<etcd::LeaseKeeper>> keeper = client->GrantAndKeepAlive(1, held.Callbacks());
  REQUIRE(keeper.ok());
  CHECK((*keeper)->lease().ttl_s == 1);
  const auto t0 = Clock::now();
  while (SecondsSince(t0) < 3.0) {  // Watching the lease for 3 TTLs (the duration is what is tested).
    absl::StatusOr<int64_t> ttl = admin->LeaseTimeToLive((*keeper)->lease().id);
    REQUIRE(ttl.ok());
    REQUIRE((*keeper)->alive());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK((*keeper)->guaranteed_remaining() > absl::ZeroDuration());
  CHECK_FALSE(held.Lost());
  CHECK(held.Unconfirmed() == 0);

  // Renewed every 250 ms by default, not every third of the TTL: a 2 s lease
  // stays confirmed through an etcd outage of 1.55 s (2 s - 250 ms - margin),
  // not 1.13 s. Counted from outside the keeper: its confirmations.
  std::atomic<int> renewals{0};
  etcd::LeaseCallbacks counting;
  counting.on_valid_until = [&renewals](std::chrono::steady_clock::time_point) { ++renewals; };
  absl::StatusOr<std::unique_ptr<etcd::LeaseKeeper>> k3 = client->GrantAndKeepAlive(2, std::move(counting));
  REQUIRE(k3.ok());
  const auto t3 = Clock::now();
  REQUIRE(WaitFor([&] { return renewals.load() >= 6; }, 5));  // The grant, then five renewals.
  INFO("took " << SecondsSince(t3) << " s");
  CHECK(SecondsSince(t3) < 1.0 + 0.5);  // 1.25 s at 250 ms; 3.3 s at TTL/3.
  (*k3)->Stop();

  // Revoked by someone else: on_lost says so within a renewal interval.
  LossLog revoked;
  absl::StatusOr<std::unique_ptr<etcd::LeaseKeeper>> k2 = client->GrantAndKeepAlive(1, revoked.Callbacks());
  REQUIRE(k2.ok());
  REQUIRE(admin->LeaseRevoke((*k2)->lease().id).ok());
  REQUIRE(WaitFor([&] { return revoked.Lost(); }, 3));
  CHECK(revoked.why.code() == absl::StatusCode::kNotFound);
  CHECK(Mentions(revoked.why, "expired or was revoked"));
  CHECK_FALSE((*k2)->alive());
  CHECK(admin->LeaseRevoke((*k2)->lease().id).code() == absl::StatusCode::kNotFound);

  // Quorum lost: two of three members killed.
  REQUIRE(client->Put("/q/before", "1").ok());
  cluster.Kill(1);
  cluster.Kill(2);
  const auto killed = Clock::now();
  // Every call ends within call_timeout + probe_timeout, with one line that
  // says the leader is gone; nothing hangs.
  const double bound = absl::ToDoubleSeconds(o.call_timeout + o.probe_timeout) + 1.0;
  auto check_fails = [&](const char* what, const absl::Status& s, double took) {
    INFO(what << ": " << s.message() << " (" << took << " s)");
    CHECK_FALSE(s.ok());
    CHECK((s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded));
    CHECK(Mentions(s, "no leader"));
    CHECK(OneLine(s));
    CHECK(took < bound);
  };
  auto t = Clock::now();
  absl::Status put = client->Put("/q/x", "1").status();
  check_fails("Put", put, SecondsSince(t));
  std::printf("etcd quorum loss: Put: %s\n", std::string(put.message()).c_str());
  CHECK(Mentions(put, "quorum lost"));
  t = Clock::now();
  check_fails("Get", client->Get("/q/before").status(), SecondsSince(t));
  t = Clock::now();
  check_fails("Connect", client->Connect(), SecondsSince(t));
  // The kept lease cannot be renewed: unconfirmed within its TTL of the
  // last renewal etcd confirmed. That one may come after the kill: etcd's
  // leader renews leases by itself until it steps down for lack of a quorum,
  // an election timeout (0.5 s) later. So TTL + 0.5 s, and some room for a busy machine.
  REQUIRE(WaitFor([&] { return held.Unconfirmed() == 1; }, 5));
  const double unconfirmed_after = std::chrono::duration<double>(held.at - killed).count();
  std::printf("etcd quorum loss: the lease keeper reported the lease unconfirmed %.3f s after the kill (TTL 1 s)\n",
              unconfirmed_after);
  CHECK(Mentions(held.why, "could not be renewed within its TTL of 1 s"));
  CHECK(OneLine(held.why));
  if (meshrun::testing::kEtcdTimingBounds) CHECK(unconfirmed_after <= 2.0);
  CHECK((*keeper)->guaranteed_remaining() == absl::ZeroDuration());
  CHECK((*keeper)->alive());  // It may yet live: etcd cannot expire it without a leader.
  CHECK_FALSE(held.Lost());

  // Quorum back: calls succeed again, and the lease is confirmed again
  // (etcd's new leader extended it): it lived throughout.
  REQUIRE(cluster.Restart(1));
  REQUIRE(cluster.Restart(2));
  REQUIRE_MSG(cluster.WaitHealthy(20), cluster.error());
  absl::Status again;
  REQUIRE(WaitFor([&] { return (again = client->Put("/q/after", "1").status()).ok(); }, 15));
  CHECK(client->Get("/q/before")->kvs.at(0).value == "1");
  // (etcd may elect more than once while its members come back: the lease
  // may be unconfirmed and confirmed again more than once.)
  REQUIRE(WaitFor([&] {
    return held.Confirmed() >= 1 && held.Confirmed() == held.Unconfirmed() &&
           (*keeper)->guaranteed_remaining() > absl::ZeroDuration();
  }, 10));
  CHECK_FALSE(held.Lost());
  CHECK(admin->LeaseTimeToLive((*keeper)->lease().id).ok());
}
