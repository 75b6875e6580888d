// Leader election through etcd (rendezvous/state/etcd/election.h) against
// real etcd clusters: candidate processes killed with kill -9, fencing of a
// leader whose lease was revoked, resignation, observation, the loss of the
// leader's etcd member, and the loss of etcd's quorum.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/state/etcd/election.h"
#include "tests/rendezvous/state/etcd/etcd_test_util.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/subprocess.h"

using meshrun::testing::EtcdCluster;
using meshrun::testing::Mentions;
using meshrun::testing::OneLine;
using meshrun::testing::SecondsSince;
using meshrun::testing::TestClient;
using meshrun::testing::TestClientOptions;
using meshrun::testing::WaitFor;
namespace etcd = meshrun::rendezvous::state::etcd;
using Clock = std::chrono::steady_clock;

namespace {

long long MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// What one candidate's callbacks saw, read from the test's thread.
struct CandidateLog {
  std::mutex mu;
  int elected = 0;
  int deposed = 0;
  int paused = 0;
  int resumed = 0;
  absl::Status why;  // Of the last on_deposed or on_paused.
  Clock::time_point elected_at;
  Clock::time_point deposed_at;
  Clock::time_point paused_at;
  Clock::time_point valid_until;  // The lease's last guarantee told.
  etcd::ElectionCallbacks Callbacks() {
    etcd::ElectionCallbacks cb;
    cb.on_lease_valid_until = [this](Clock::time_point t) {
      std::lock_guard<std::mutex> lock(mu);
      valid_until = t;
    };
    cb.on_elected = [this](const etcd::LeaderInfo&) {
      std::lock_guard<std::mutex> lock(mu);
      ++elected;
      elected_at = Clock::now();
    };
    cb.on_deposed = [this](const absl::Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      ++deposed;
      why = s;
      deposed_at = Clock::now();
    };
    cb.on_paused = [this](const absl::Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      ++paused;
      why = s;
      paused_at = Clock::now();
    };
    cb.on_resumed = [this] {
      std::lock_guard<std::mutex> lock(mu);
      ++resumed;
    };
    return cb;
  }
  int Paused() {
    std::lock_guard<std::mutex> lock(mu);
    return paused;
  }
  Clock::time_point ValidUntil() {
    std::lock_guard<std::mutex> lock(mu);
    return valid_until;
  }
  int Resumed() {
    std::lock_guard<std::mutex> lock(mu);
    return resumed;
  }
  int Elected() {
    std::lock_guard<std::mutex> lock(mu);
    return elected;
  }
  int Deposed() {
    std::lock_guard<std::mutex> lock(mu);
    return deposed;
  }
};

// A candidate process (tests/etcd/etcd_candidate.cc) and its output.
struct CandidateProc {
  std::string id;
  std::string out;
  pid_t pid = -1;
  // The line starting with `word` ("ELECTED", "DEPOSED"), or "".
  std::string Line(const std::string& word) const {
    std::istringstream in(meshrun::testing::ReadFile(out));
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(word + " ", 0) == 0) return line;
    }
    return "";
  }
  long long ElectedNs() const {
    std::istringstream in(Line("ELECTED"));
    std::string word, who;
    long long ns = 0;
    in >> word >> who >> ns;
    return ns;
  }
};

etcd::ElectionOptions Options(const std::string& prefix) {
  etcd::ElectionOptions o;
  o.prefix = prefix;
  o.lease_ttl_s = 1;  // etcd's floor with --election-timeout=500.
  return o;
}

}  // namespace

TEST_CASE("etcd election: one of three candidate processes leads, and after kill -9 of it the next leads within TTL",
          "[etcd][election]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  auto client = TestClient(TestClientOptions(cluster));
  REQUIRE(client != nullptr);
  etcd::Election observer(client.get(), Options("/e/kill/"));
  std::mutex seen_mu;
  std::vector<std::string> leaders_seen;  // By Observe, in order.
  std::unique_ptr<etcd::LeaderObserver> obs = observer.Observe([&](const std::optional<etcd::LeaderInfo>& l) {
    std::lock_guard<std::mutex> lock(seen_mu);
    leaders_seen.push_back(l ? l->candidate_id : "-");
  });

  const std::string dir = meshrun::testing::TempDir();
  std::vector<CandidateProc> procs;
  for (int i = 0; i < 3; ++i) {
    CandidateProc p;
    p.id = "c" + std::to_string(i);
    p.out = dir + "/" + p.id + ".out";
    // Each candidate talks to "its" member first, as a replica on that member's host would.
    std::vector<int> order = {i, (i + 1) % 3, (i + 2) % 3};
    std::string endpoints;
    for (int j : order) endpoints += (endpoints.empty() ? "" : ",") + cluster.ClientAddress(j);
    p.pid = meshrun::testing::StartCommand({ETCD_CANDIDATE_BINARY, "--endpoints", endpoints, "--prefix", "/e/kill/",
                                            "--id", p.id, "--ttl", "1", "--max_seconds", "60"},
                                           {}, p.out, dir + "/" + p.id + ".err");
    REQUIRE(p.pid > 0);
    procs.push_back(p);
  }
  auto leaders = [&] {
    std::vector<int> who;
    for (int i = 0; i < 3; ++i) {
      if (!procs[i].Line("ELECTED").empty() && procs[i].pid > 0) who.push_back(i);
    }
    return who;
  };
  REQUIRE(WaitFor([&] { return !leaders().empty(); }, 10));
  // Exactly one leads, and etcd agrees on which.
  std::vector<int> first = leaders();
  REQUIRE(first.size() == 1);
  const int leader = first[0];
  absl::StatusOr<std::optional<etcd::LeaderInfo>> l = observer.Leader();
  REQUIRE(l.ok());
  REQUIRE(l->has_value());
  CHECK((*l)->candidate_id == procs[leader].id);
  CHECK((*l)->value == "value-of-" + procs[leader].id);
  REQUIRE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(seen_mu);
    return !leaders_seen.empty() && leaders_seen.back() == procs[leader].id;
  }, 5));

  // kill -9 of the leader's process: its lease (1 s) expires, the next leads.
  const long long killed_ns = MonotonicNs();
  ::kill(procs[leader].pid, SIGKILL);
  meshrun::testing::WaitCommand(procs[leader].pid, 5);
  procs[leader].pid = -1;
  REQUIRE(WaitFor([&] { return !leaders().empty(); }, 10));
  std::vector<int> next = leaders();
  REQUIRE(next.size() == 1);
  CHECK(next[0] != leader);
  const double failover_s = (procs[next[0]].ElectedNs() - killed_ns) / 1e9;
  std::printf("etcd election: after kill -9 of the leader's process, %s led %.3f s later (TTL 1 s)\n",
              procs[next[0]].id.c_str(), failover_s);
  CHECK(failover_s > 0);
  // TTL, plus etcd's expiry check (every 500 ms), plus the watch: 1.5 s
  // measured at most here; 2.5 s leaves room for a loaded machine.
  if (meshrun::testing::kEtcdTimingBounds) CHECK(failover_s < 2.5);
  REQUIRE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(seen_mu);
    return !leaders_seen.empty() && leaders_seen.back() == procs[next[0]].id;
  }, 5));
  // The third is still waiting, never elected.
  for (int i = 0; i < 3; ++i) {
    if (i != leader && i != next[0]) CHECK(procs[i].Line("ELECTED").empty());
  }
  for (auto& p : procs) {
    if (p.pid > 0) {
      ::kill(p.pid, SIGKILL);
      meshrun::testing::WaitCommand(p.pid, 5);
    }
  }
}

TEST_CASE("etcd election: a leader whose lease was revoked is fenced, and two leaders' writes never interleave",
          "[etcd][election]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  auto ca = TestClient(TestClientOptions(cluster, {0, 1, 2}));
  auto cb = TestClient(TestClientOptions(cluster, {1, 2, 0}));
  auto admin = TestClient(TestClientOptions(cluster, {2, 0, 1}));
  REQUIRE(ca != nullptr);
  REQUIRE(cb != nullptr);
  REQUIRE(admin != nullptr);
  etcd::Election a(ca.get(), Options("/e/fence/"));
  etcd::Election b(cb.get(), Options("/e/fence/"));
  CandidateLog la, lb;
  REQUIRE(a.Campaign("A", "10.0.0.1:29400", la.Callbacks()).ok());
  REQUIRE(WaitFor([&] { return la.Elected() == 1; }, 5));
  REQUIRE(b.Campaign("B", "10.0.0.2:29400", lb.Callbacks()).ok());
  CHECK(a.IsLeader());
  CHECK_FALSE(b.IsLeader());
  CHECK(a.Campaign("A", "x", la.Callbacks()).code() == absl::StatusCode::kFailedPrecondition);

  // Only the leader writes.
  auto write = [](etcd::Election& e, const std::string& who) {
    etcd::Txn t;
    t.success = {etcd::Op::Put("/e/fence-data/owner", who)};
    return e.FencedTxn(t);
  };
  std::vector<int64_t> a_revisions, b_revisions;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<etcd::TxnResult> r = write(a, "A");
    REQUIRE(r.ok());
    a_revisions.push_back(r->revision);
  }
  absl::StatusOr<etcd::TxnResult> early = write(b, "B");
  CHECK(early.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Mentions(early.status(), "not the leader"));

  // The fence itself, at etcd: A's compares fail once its lease is revoked,
  // whatever A knows by then.
  std::optional<etcd::LeaderInfo> self = a.Self();
  REQUIRE(self.has_value());
  etcd::Txn probe;
  probe.compare = {etcd::Compare::CreateRevision(self->key, etcd::Compare::Result::kEqual, self->create_revision),
                   etcd::Compare::Lease(self->key, etcd::Compare::Result::kEqual, self->lease)};
  REQUIRE(admin->Transact(probe)->succeeded);

  // An operator revokes A's lease (as etcd would let it expire when A is cut off).
  REQUIRE(admin->LeaseRevoke(self->lease).ok());
  CHECK_FALSE(admin->Transact(probe)->succeeded);
  absl::StatusOr<etcd::TxnResult> refused = write(a, "A");
  REQUIRE_FALSE(refused.ok());
  INFO(refused.status().message());
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(OneLine(refused.status()));
  // Either etcd refused it (the fence) or A knew already (its watch or its
  // lease keeper): in both cases A is deposed and never writes again.
  CHECK((Mentions(refused.status(), "fenced write refused") || Mentions(refused.status(), "not the leader")));
  REQUIRE(WaitFor([&] { return la.Deposed() == 1; }, 3));
  CHECK_FALSE(a.IsLeader());
  CHECK(la.why.code() != absl::StatusCode::kOk);

  // B leads at once (A's key went with its lease) and writes.
  REQUIRE(WaitFor([&] { return lb.Elected() == 1; }, 5));
  REQUIRE(b.IsLeader());
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<etcd::TxnResult> r = write(b, "B");
    REQUIRE(r.ok());
    b_revisions.push_back(r->revision);
    CHECK(write(a, "A").status().code() == absl::StatusCode::kFailedPrecondition);
  }
  // Every write of A comes before every write of B.
  CHECK(a_revisions.back() < b_revisions.front());
  CHECK(ca->Get("/e/fence-data/owner")->kvs.at(0).value == "B");
  absl::StatusOr<std::optional<etcd::LeaderInfo>> now = a.Leader();
  REQUIRE(now.ok());
  REQUIRE(now->has_value());
  CHECK((*now)->candidate_id == "B");
  CHECK((*now)->value == "10.0.0.2:29400");

  // A campaigns again (after its deposition) and waits behind B; B resigns:
  // A leads at once, with no TTL to wait for.
  CandidateLog la2;
  REQUIRE(a.Campaign("A", "10.0.0.1:29400", la2.Callbacks()).ok());
  CHECK(la2.Elected() == 0);
  const auto t0 = Clock::now();
  REQUIRE(b.Resign().ok());
  REQUIRE(WaitFor([&] { return la2.Elected() == 1; }, 5));
  const double handover_s = SecondsSince(t0);
  std::printf("etcd election: after Resign, the next candidate led %.3f s later\n", handover_s);
  if (meshrun::testing::kEtcdTimingBounds) CHECK(handover_s < 0.9);  // Below the TTL: no expiry waited for.
  CHECK(lb.Deposed() == 0);  // Resign does not call on_deposed.
  CHECK_FALSE(b.IsLeader());
  CHECK(a.IsLeader());
  REQUIRE(write(a, "A").ok());
}

TEST_CASE("etcd election: losing etcd's leader changes no leadership, losing quorum pauses the leader within its TTL",
          "[etcd][election]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  auto ca = TestClient(TestClientOptions(cluster, {0, 1, 2}));
  auto cb = TestClient(TestClientOptions(cluster, {1, 2, 0}));
  etcd::Election a(ca.get(), Options("/e/member/"));
  etcd::Election b(cb.get(), Options("/e/member/"));
  CandidateLog la, lb;
  REQUIRE(a.Campaign("A", "a", la.Callbacks()).ok());
  REQUIRE(WaitFor([&] { return la.Elected() == 1; }, 5));
  // The lease's guarantee (what the gate serves until): ahead, within the TTL.
  CHECK(la.ValidUntil() > Clock::now());
  CHECK(la.ValidUntil() <= Clock::now() + std::chrono::seconds(1));
  REQUIRE(b.Campaign("B", "b", lb.Callbacks()).ok());

  // kill -9 of member 0, the one A talks to, made etcd's own leader first
  // (the worst case: etcd elects a new leader meanwhile, and writes in
  // flight to the old one are lost). A stays the leader: its client moves to
  // member 1, its fenced writes are retried exactly once, its lease renewals
  // go through once etcd has its new leader (which extends every lease). With
  // a TTL of 1 s, as short as this etcd allows, A may pause for a moment
  // while etcd elects (election.h, "Choosing the TTL"); it is never deposed.
  REQUIRE_MSG(cluster.MoveLeader(0), cluster.error());
  cluster.Kill(0);
  const auto t0 = Clock::now();
  int writes = 0;
  double slowest = 0;
  while (SecondsSince(t0) < 3.0) {  // Three TTLs of watching (the duration is what is tested).
    etcd::Txn t;
    t.success = {etcd::Op::Put("/e/member-data/x", std::to_string(writes))};
    const auto w0 = Clock::now();
    absl::StatusOr<etcd::TxnResult> r = a.FencedTxn(t);
    slowest = std::max(slowest, SecondsSince(w0));
    REQUIRE_MSG(r.ok(), r.status().message());
    ++writes;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // A write every 50 ms or so.
  }
  std::printf("etcd election: etcd's leader (the leader's own member) killed: %d fenced writes in 3 s, the slowest "
              "%.3f s; paused %d time(s), resumed %d\n", writes, slowest, la.Paused(), la.Resumed());
  REQUIRE(WaitFor([&] { return a.IsLeader(); }, 3));
  CHECK(la.Deposed() == 0);
  CHECK(la.Paused() == la.Resumed());
  CHECK(lb.Elected() == 0);
  CHECK(ca->current_member() != cluster.ClientAddress(0));
  CHECK(ca->Get("/e/member-data/x")->kvs.at(0).value == std::to_string(writes - 1));

  // Quorum lost (member 1 too): A cannot renew, and stops serving no later
  // than its TTL after its last confirmed renewal - which may come after the
  // kill: etcd's leader renews leases until it steps down for lack of a
  // quorum, an election timeout (0.5 s) later. So TTL + 0.5 s, and some room for a busy machine.
  const int paused_before = la.Paused();
  cluster.Kill(1);
  const auto killed = Clock::now();
  REQUIRE(WaitFor([&] { return la.Paused() == paused_before + 1; }, 5));
  const double paused_after = std::chrono::duration<double>(la.paused_at - killed).count();
  std::printf("etcd election: with quorum lost, the leader paused %.3f s after the kill (TTL 1 s)\n", paused_after);
  INFO(la.why.message());
  CHECK(Mentions(la.why, "could not be renewed within its TTL of 1 s"));
  CHECK(la.ValidUntil() <= Clock::now());  // No guarantee left: a gate serves nothing more.
  if (meshrun::testing::kEtcdTimingBounds) CHECK(paused_after <= 2.0);
  CHECK_FALSE(a.IsLeader());
  etcd::Txn t;
  t.success = {etcd::Op::Put("/e/member-data/x", "late")};
  const auto w0 = Clock::now();
  absl::Status late = a.FencedTxn(t).status();
  CHECK_FALSE(late.ok());
  CHECK(Mentions(late, "no leader"));
  CHECK(SecondsSince(w0) < 3 * 4.0);  // max_write_attempts x (call_timeout + probe_timeout).
  CHECK(la.Deposed() == 0);
  CHECK(lb.Elected() == 0);

  // Quorum back: etcd's new leader extends the leases, so A's lease lived
  // throughout: A leads again, and B never did.
  REQUIRE(cluster.Restart(0));
  REQUIRE(cluster.Restart(1));
  REQUIRE_MSG(cluster.WaitHealthy(20), cluster.error());
  REQUIRE(WaitFor([&] { return la.Resumed() == la.Paused(); }, 10));
  REQUIRE(a.IsLeader());
  t.success = {etcd::Op::Put("/e/member-data/x", "back")};
  absl::StatusOr<etcd::TxnResult> back = a.FencedTxn(t);
  REQUIRE_MSG(back.ok(), back.status().message());
  CHECK(ca->Get("/e/member-data/x")->kvs.at(0).value == "back");
  CHECK(la.Deposed() == 0);
  CHECK(lb.Elected() == 0);
  absl::StatusOr<std::optional<etcd::LeaderInfo>> now = b.Leader();
  REQUIRE(now.ok());
  REQUIRE(now->has_value());
  CHECK((*now)->candidate_id == "A");
}
