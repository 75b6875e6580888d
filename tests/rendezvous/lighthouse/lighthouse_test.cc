// torchft's lighthouse semantics (rendezvous/lighthouse/): the quorum rule,
// the quorum id, and the waiting calls.
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "rendezvous/lighthouse/lighthouse.h"
#include "rendezvous/lighthouse/lighthouse_registry.h"
#include "rendezvous/lighthouse/quorum.h"

namespace lh = meshrun::rendezvous::lighthouse;

namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

lh::QuorumMember Member(const std::string& id, int64_t step = 0) {
  lh::QuorumMember m;
  m.replica_id = id;
  m.address = "http://" + id + ":1";
  m.store_address = id + ":2";
  m.step = step;
  m.world_size = 2;
  return m;
}

// The replica ids of a quorum's members, in order.
std::vector<std::string> Ids(const std::vector<lh::QuorumMember>& ms) {
  std::vector<std::string> ids;
  for (const auto& m : ms) ids.push_back(m.replica_id);
  return ids;
}

// Records each answer of Lighthouse::Join.
struct Answers {
  std::vector<absl::StatusOr<lh::Quorum>> got;
  lh::Lighthouse::Answer For() {
    return [this](absl::StatusOr<lh::Quorum> q) { got.push_back(std::move(q)); };
  }
};

}  // namespace

TEST_CASE("quorum rule: min_replicas, more than half of the healthy groups, join_timeout", "[lighthouse]") {
  lh::LighthouseSettings s;
  s.min_replicas = 2;
  s.join_timeout = absl::Seconds(10);
  s.heartbeat_timeout = absl::Seconds(60);
  lh::QuorumState st;
  for (const char* id : {"a", "b", "c", "d"}) st.heartbeats[id] = kT0;
  st.participants["b"] = {kT0, Member("b")};
  // 1 of 4: under min_replicas.
  lh::QuorumDecision d = lh::ComputeQuorum(kT0, st, s);
  CHECK_FALSE(d.participants.has_value());
  CHECK(d.reason.find("min_replicas is 2") != std::string::npos);
  // 2 of 4: not more than half.
  st.participants["a"] = {kT0, Member("a")};
  d = lh::ComputeQuorum(kT0, st, s);
  CHECK_FALSE(d.participants.has_value());
  CHECK(d.reason.find("more than half of 4") != std::string::npos);
  // 3 of 4: valid, but waits for the straggler until join_timeout.
  st.participants["d"] = {kT0 + absl::Seconds(1), Member("d")};
  d = lh::ComputeQuorum(kT0 + absl::Seconds(9), st, s);
  CHECK_FALSE(d.participants.has_value());
  CHECK(d.reason.find("waits for 1 healthy stragglers") != std::string::npos);
  // join_timeout counts from the earliest call: met at 10 s, sorted by id.
  d = lh::ComputeQuorum(kT0 + absl::Seconds(10), st, s);
  REQUIRE(d.participants.has_value());
  CHECK(Ids(*d.participants) == std::vector<std::string>{"a", "b", "d"});
  // Every healthy group waiting: met at once.
  st.participants["c"] = {kT0, Member("c")};
  d = lh::ComputeQuorum(kT0, st, s);
  REQUIRE(d.participants.has_value());
  CHECK(Ids(*d.participants) == std::vector<std::string>{"a", "b", "c", "d"});
}

TEST_CASE("quorum rule: a group silent for heartbeat_timeout is not healthy", "[lighthouse]") {
  lh::LighthouseSettings s;
  s.heartbeat_timeout = absl::Seconds(5);
  lh::QuorumState st;
  st.heartbeats["a"] = kT0 + absl::Seconds(5);
  st.heartbeats["b"] = kT0;  // Silent from kT0.
  st.participants["a"] = {kT0 + absl::Seconds(5), Member("a")};
  // At 4.9 s b is healthy: a waits for it (join_timeout 60 s).
  CHECK_FALSE(lh::ComputeQuorum(kT0 + absl::Milliseconds(4900), st, s).participants.has_value());
  // At 5 s it is not: a alone is more than half of 1.
  lh::QuorumDecision d = lh::ComputeQuorum(kT0 + absl::Seconds(5), st, s);
  REQUIRE(d.participants.has_value());
  CHECK(Ids(*d.participants) == std::vector<std::string>{"a"});
  // A waiting group whose heartbeat timed out is no candidate.
  st.participants["b"] = {kT0, Member("b")};
  d = lh::ComputeQuorum(kT0 + absl::Seconds(5), st, s);
  REQUIRE(d.participants.has_value());
  CHECK(Ids(*d.participants) == std::vector<std::string>{"a"});
}

TEST_CASE("quorum rule: the fast quorum and shrink_only", "[lighthouse]") {
  lh::LighthouseSettings s;
  s.min_replicas = 3;
  lh::QuorumState st;
  st.previous = lh::Quorum{7, {Member("a"), Member("b")}, kT0};
  for (const char* id : {"a", "b", "c", "d", "e"}) st.heartbeats[id] = kT0;
  st.participants["a"] = {kT0, Member("a")};
  st.participants["b"] = {kT0, Member("b")};
  // Every previous member is back: a quorum at once, under min_replicas and
  // with 2 of 5 healthy waiting.
  lh::QuorumDecision d = lh::ComputeQuorum(kT0, st, s);
  REQUIRE(d.participants.has_value());
  CHECK(Ids(*d.participants) == std::vector<std::string>{"a", "b"});
  // A new group waiting with them joins the fast quorum.
  st.participants["c"] = {kT0, Member("c")};
  d = lh::ComputeQuorum(kT0, st, s);
  REQUIRE(d.participants.has_value());
  CHECK(Ids(*d.participants) == std::vector<std::string>{"a", "b", "c"});
  // shrink_only: only the previous members stay.
  st.participants["a"].member.shrink_only = true;
  d = lh::ComputeQuorum(kT0, st, s);
  REQUIRE(d.participants.has_value());
  CHECK(Ids(*d.participants) == std::vector<std::string>{"a", "b"});
  // A previous member missing: the slow rule (min_replicas 3, 3 waiting of 5).
  st.participants.erase("b");
  st.participants["a"].member.shrink_only = false;
  st.participants["d"] = {kT0, Member("d")};
  d = lh::ComputeQuorum(kT0, st, s);
  CHECK_FALSE(d.participants.has_value());
  d = lh::ComputeQuorum(kT0 + s.join_timeout, st, s);
  CHECK_FALSE(d.participants.has_value());  // Everyone's heartbeat is older than 5 s.
  for (auto& [id, t] : st.heartbeats) t = kT0 + s.join_timeout;
  d = lh::ComputeQuorum(kT0 + s.join_timeout, st, s);
  REQUIRE(d.participants.has_value());
  CHECK(Ids(*d.participants) == std::vector<std::string>{"a", "c", "d"});
}

TEST_CASE("lighthouse: one quorum answers every member with one id, which grows only when the members change",
          "[lighthouse]") {
  lh::LighthouseSettings s;
  s.min_replicas = 2;
  lh::Lighthouse l(s, 16);
  Answers a, b, c;
  REQUIRE(l.Join(Member("g0", 10), kT0, a.For()).ok());
  CHECK(a.got.empty());
  REQUIRE(l.Join(Member("g1", 12), kT0, b.For()).ok());
  REQUIRE(a.got.size() == 1);
  REQUIRE(b.got.size() == 1);
  REQUIRE(a.got[0].ok());
  CHECK(a.got[0]->quorum_id == 1);
  CHECK(b.got[0]->quorum_id == 1);
  CHECK(Ids(a.got[0]->participants) == std::vector<std::string>{"g0", "g1"});
  CHECK(a.got[0]->participants[1].step == 12);
  CHECK(a.got[0]->participants[1].store_address == "g1:2");
  // The same members again (the next step): the fast quorum, same id.
  REQUIRE(l.Join(Member("g1", 13), kT0 + absl::Seconds(1), b.For()).ok());
  CHECK(b.got.size() == 1);
  REQUIRE(l.Join(Member("g0", 13), kT0 + absl::Seconds(1), a.For()).ok());
  REQUIRE(b.got.size() == 2);
  CHECK(b.got[1]->quorum_id == 1);
  // g1 goes silent; g0 alone after heartbeat_timeout: a new membership, id 2.
  const absl::Time later = kT0 + absl::Seconds(1) + s.heartbeat_timeout;
  REQUIRE(l.Join(Member("g0", 14), later, a.For()).ok());
  l.Tick(later);
  CHECK(a.got.size() == 2);  // min_replicas 2: g0 alone waits...
  // ...until a third group comes: g0 and g2, id 2.
  REQUIRE(l.Join(Member("g2", 0), later, c.For()).ok());
  REQUIRE(a.got.size() == 3);
  CHECK(a.got[2]->quorum_id == 2);
  CHECK(Ids(a.got[2]->participants) == std::vector<std::string>{"g0", "g2"});
  CHECK(l.quorum_id() == 2);
}

TEST_CASE("lighthouse: cancelled calls, the bound on groups, close", "[lighthouse]") {
  lh::LighthouseSettings s;
  s.min_replicas = 3;
  lh::Lighthouse l(s, 2);
  Answers a, b;
  absl::StatusOr<uint64_t> t = l.Join(Member("g0"), kT0, a.For());
  REQUIRE(t.ok());
  CHECK(l.Cancel(*t));
  CHECK_FALSE(l.Cancel(*t));
  REQUIRE(l.Join(Member("g1"), kT0, b.For()).ok());
  absl::StatusOr<uint64_t> third = l.Join(Member("g2"), kT0, b.For());
  CHECK(third.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(l.Heartbeat("g3", kT0).code() == absl::StatusCode::kResourceExhausted);
  CHECK(l.Heartbeat("g0", kT0).ok());
  // A known group's heartbeat times out: room for another.
  // g0's call was cancelled and its heartbeat timed out: it holds no place
  // (g1 waits and keeps its own).
  CHECK(l.Heartbeat("g3", kT0 + absl::Seconds(10)).ok());
  CHECK(l.Heartbeat("g4", kT0 + absl::Seconds(10)).code() == absl::StatusCode::kResourceExhausted);
  l.Close(absl::UnavailableError("this replica stopped leading"));
  REQUIRE(b.got.size() == 1);
  CHECK(b.got[0].status().code() == absl::StatusCode::kUnavailable);
  CHECK(a.got.empty());
  CHECK(l.Join(Member("g1"), kT0, b.For()).status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("lighthouse: a group whose last call was cancelled is put in no quorum", "[lighthouse]") {
  lh::LighthouseSettings s;
  s.min_replicas = 2;
  s.join_timeout = absl::ZeroDuration();  // A quorum of whoever is a candidate, at once.
  lh::Lighthouse l(s, 8);
  Answers a, b, dead;
  // A group's process asks, then dies: its call is cancelled while its heartbeat is fresh.
  absl::StatusOr<uint64_t> t = l.Join(Member("g1:dead"), kT0, dead.For());
  REQUIRE(t.ok());
  REQUIRE(l.Cancel(*t));
  REQUIRE(l.Join(Member("g0"), kT0, a.For()).ok());
  REQUIRE(l.Join(Member("g2"), kT0, b.For()).ok());
  l.Tick(kT0);
  REQUIRE(a.got.size() == 1);
  REQUIRE(a.got[0].ok());
  CHECK(Ids(a.got[0]->participants) == std::vector<std::string>{"g0", "g2"});  // Not the dead one.
  CHECK(dead.got.empty());
}

TEST_CASE("lighthouse registry: quorum ids never go back across a close or a raised floor", "[lighthouse]") {
  lh::RegistryOptions o;
  lh::LighthouseRegistry r(o);
  lh::LighthouseSettings s;  // min_replicas 1: each Join is a quorum.
  auto first = r.Get("job", s);
  REQUIRE(first.ok());
  Answers a;
  REQUIRE((*first)->Join(Member("g0"), absl::Now(), a.For()).ok());
  REQUIRE((*first)->Join(Member("g1"), absl::Now(), a.For()).ok());  // Waits: g0 is not back.
  REQUIRE((*first)->Join(Member("g0"), absl::Now(), a.For()).ok());  // Fast quorum + g1: a new membership.
  REQUIRE(a.got.size() == 3);
  CHECK(a.got[1]->quorum_id == 2);
  CHECK(a.got[2]->quorum_id == 2);
  // Closed (this replica stood by, or reloaded): the next lighthouse of the
  // run goes on above 2.
  r.CloseAll(absl::UnavailableError("reload"));
  auto second = r.Get("job", s);
  REQUIRE(second.ok());
  REQUIRE((*second)->Join(Member("g0"), absl::Now(), a.For()).ok());
  CHECK(a.got[3]->quorum_id == 3);
  // A new term's floor (its election revision x 2^24) is above all.
  r.RaiseQuorumIdFloor(int64_t{7} << 24);
  r.CloseAll(absl::UnavailableError("failover"));
  auto third = r.Get("job", s);
  REQUIRE(third.ok());
  REQUIRE((*third)->Join(Member("g0"), absl::Now(), a.For()).ok());
  CHECK(a.got[4]->quorum_id == (int64_t{7} << 24) + 1);
  // Another run's lighthouse starts above the floor too (ids are per run).
  auto other = r.Get("other", s);
  REQUIRE(other.ok());
  REQUIRE((*other)->Join(Member("g0"), absl::Now(), a.For()).ok());
  CHECK(a.got[5]->quorum_id == (int64_t{7} << 24) + 1);
}

TEST_CASE("lighthouse: one group's waiting calls, the quorum's bytes, and dead groups are bounded", "[lighthouse]") {
  lh::LighthouseSettings s;
  s.min_replicas = 8;
  s.heartbeat_timeout = absl::Seconds(1);
  lh::Lighthouse l(s, 8, 0, 4096);
  Answers a;
  // 4 calls of one group wait; the 5th is refused, naming the group.
  for (int i = 0; i < 4; ++i) REQUIRE(l.Join(Member("same"), kT0, a.For()).ok());
  absl::StatusOr<uint64_t> fifth = l.Join(Member("same"), kT0, a.For());
  CHECK(fifth.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(fifth.status().message()).find("'same' has 4 Quorum calls waiting") != std::string::npos);
  // Members past max_quorum_bytes: refused.
  lh::QuorumMember big = Member("big");
  big.data.assign(5000, 'x');
  CHECK(l.Join(big, kT0, a.For()).status().code() == absl::StatusCode::kResourceExhausted);
  // 7 groups ask once, their calls end, they go silent: once their
  // heartbeats time out they hold no place, and 8 live groups get in.
  lh::Lighthouse w(s, 8);
  for (int i = 0; i < 7; ++i) {
    absl::StatusOr<uint64_t> t = w.Join(Member("dead" + std::to_string(i)), kT0, a.For());
    REQUIRE(t.ok());
    REQUIRE(w.Cancel(*t));
  }
  const absl::Time later = kT0 + absl::Seconds(2);
  for (int i = 0; i < 8; ++i) REQUIRE(w.Join(Member("live" + std::to_string(i)), later, a.For()).ok());
  REQUIRE(a.got.size() == 8);
  CHECK(a.got.back()->participants.size() == 8);
  CHECK(a.got.back()->participants[0].replica_id == "live0");
}
