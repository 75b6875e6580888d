// A run record bigger than one etcd request (record_parts.h), on a real
// 3-member etcd with etcd's default --max-request-bytes (1.5 MiB): the record
// of a 10,000-node run (about 5 MiB) is saved in parts and loaded whole by a
// fresh journal; a smaller save, a removal and a load each leave no part
// behind that no record names. Checked from outside, by reading etcd.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "rendezvous/state/etcd/election.h"
#include "rendezvous/state/etcd/etcd_journal.h"
#include "rendezvous/state/etcd/record_parts.h"
#include "rendezvous/state/state.h"
#include "tests/rendezvous/state/etcd/etcd_test_util.h"

using namespace meshrun::testing;
namespace state = ::meshrun::rendezvous::state;

namespace {

constexpr char kPrefix[] = "/parts-test";

// Run "job"'s record at `seq` with `members` members, as a round close of
// that many nodes saves it.
state::RunRecord JobRecord(int64_t seq, int members) {
  state::RunRecord r;
  r.run_id = "job";
  r.incarnation = 3;
  r.seq = seq;
  r.state = "running";
  r.round = 1;
  for (int i = 0; i < members; ++i) {
    state::MemberRecord m;
    m.node.node_id = absl::StrCat("node-", i, "-of-a-large-job.cluster.example:12345");
    m.node.hostname = absl::StrCat("host-", i, ".cluster.example");
    m.node.addr = absl::StrCat("10.", i / 65536, ".", (i / 256) % 256, ".", i % 256);
    m.node.nproc = 8;
    m.assignment.round = 1;
    m.assignment.node_rank = i;
    m.assignment.node_count = members;
    m.assignment.rank_base = 8 * i;
    m.assignment.world_size = 8 * members;
    m.assignment.master_addr = "10.0.0.0";
    m.assignment.master_port = 29500;
    m.assignment.node_addr = m.node.addr;
    m.assignment.session = std::string(43, 'a' + i % 26);
    r.members.push_back(std::move(m));
  }
  return r;
}

// Keys under `prefix` in etcd, read from outside.
size_t KeysUnder(etcd::Client& c, const std::string& prefix) {
  absl::StatusOr<etcd::RangeResult> r = c.GetPrefix(prefix, etcd::RangeOptions());
  REQUIRE(r.ok());
  return r->kvs.size();
}

}  // namespace

TEST_CASE("etcd journal: a 10,000-node run's record is saved in parts and loaded whole, and no part outlives it",
          "[etcd][journal]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  auto client = TestClient(TestClientOptions(cluster));
  auto outside = TestClient(TestClientOptions(cluster, {2, 1, 0}));
  REQUIRE((client && outside));
  std::unique_ptr<etcd::Election> election = LeadingElection(client.get(), kPrefix);
  const std::string runs = absl::StrCat(kPrefix, "/runs/");
  const std::string parts = absl::StrCat(kPrefix, "/runs.parts/");
  auto journal = state::etcd::MakeEtcdJournal(client.get(), election.get(), runs, absl::StrCat(kPrefix, "/kv/"));

  const state::RunRecord big = JobRecord(5, 10000);
  const std::string encoded = state::EncodeRunRecord(big);
  REQUIRE(encoded.size() > (3u << 20));  // Twice etcd's default request limit, and more.
  absl::Status saved = journal->Save(big);
  REQUIRE_MSG(saved.ok(), saved.message());
  // From outside: the record's key holds a head naming its parts, all there.
  absl::StatusOr<etcd::RangeResult> head_kv = outside->Get(runs + "job");
  REQUIRE(head_kv.ok());
  REQUIRE(head_kv->kvs.size() == 1);
  std::optional<state::etcd::PartsHead> head = state::etcd::DecodeHead(head_kv->kvs[0].value);
  REQUIRE(head.has_value());
  CHECK(head->seq == 5);
  CHECK(head->bytes == static_cast<int64_t>(encoded.size()));
  CHECK(KeysUnder(*outside, parts) == static_cast<size_t>(head->count));

  // A part left by a leader lost before its head (seq 9: named by no head).
  REQUIRE(outside->Put(state::etcd::PartKey(parts, "job", 9, 0), "orphan").ok());
  {
    // Another replica's load: the record whole, the orphan dropped.
    auto fresh = state::etcd::MakeEtcdJournal(client.get(), election.get(), runs, absl::StrCat(kPrefix, "/kv/"));
    absl::StatusOr<std::vector<state::RunRecord>> loaded = fresh->Load();
    REQUIRE_MSG(loaded.ok(), loaded.status().message());
    REQUIRE(loaded->size() == 1);
    const state::RunRecord& r = (*loaded)[0];
    CHECK(r.seq == 5);
    CHECK(r.incarnation == 3);
    REQUIRE(r.members.size() == 10000);
    CHECK(r.members.back().node.node_id == big.members.back().node.node_id);
    CHECK(r.members.back().assignment.session == big.members.back().assignment.session);
    CHECK(state::EncodeRunRecord(r) == encoded);
    CHECK(KeysUnder(*outside, parts) == static_cast<size_t>(head->count));
  }

  // A smaller record of the run: one key again, its parts deleted with it.
  saved = journal->Save(JobRecord(6, 10));
  REQUIRE_MSG(saved.ok(), saved.message());
  CHECK(KeysUnder(*outside, parts) == 0);
  absl::StatusOr<std::vector<state::RunRecord>> small = journal->Load();
  REQUIRE(small.ok());
  REQUIRE(small->size() == 1);
  CHECK((*small)[0].members.size() == 10);

  // In parts twice in a row: only the newer record's parts stay.
  saved = journal->Save(JobRecord(7, 10000));
  REQUIRE_MSG(saved.ok(), saved.message());
  const size_t count7 = KeysUnder(*outside, parts);
  CHECK(count7 > 1);
  saved = journal->Save(JobRecord(8, 12000));
  REQUIRE_MSG(saved.ok(), saved.message());
  absl::StatusOr<etcd::RangeResult> head8 = outside->Get(runs + "job");
  REQUIRE(head8.ok());
  REQUIRE(head8->kvs.size() == 1);
  std::optional<state::etcd::PartsHead> h8 = state::etcd::DecodeHead(head8->kvs[0].value);
  REQUIRE(h8.has_value());
  CHECK(h8->seq == 8);
  CHECK(KeysUnder(*outside, parts) == static_cast<size_t>(h8->count));
  CHECK(KeysUnder(*outside, state::etcd::SeqPartsPrefix(parts, "job", 7)) == 0);
  // Then removed: record and parts go.
  REQUIRE(journal->Drop("job", 3).ok());  // (seq 8's parts: up to its own seq.)
  CHECK(WaitFor([&] { return KeysUnder(*outside, runs) == 0 && KeysUnder(*outside, parts) == 0; }, 10));
}
