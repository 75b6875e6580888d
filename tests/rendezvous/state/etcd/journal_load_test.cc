// The journal in etcd (rendezvous/state/etcd/etcd_journal.h): a new leader's load,
// on a real 3-member etcd: every key once, all at one revision while another
// client keeps changing them, in pages that adapt to the keys' size, and a
// page too big for the client read again in halves. The load at full scale
// (786,432 and 1,048,576 keys) is measured by bench/state_load
// (docs/performance.md, "Loading the state").
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "rendezvous/state/etcd/election.h"
#include "rendezvous/state/etcd/etcd_journal.h"
#include "rendezvous/state/state.h"
#include "tests/rendezvous/state/etcd/etcd_test_util.h"

using namespace meshrun::testing;
namespace state = ::meshrun::rendezvous::state;

namespace {

constexpr char kPrefix[] = "/load-test";

// The key prefix of run "job", incarnation 1, round 0, as the journal lays it out.
std::string KeyBase() { return state::etcd::StoreKeyPrefix(absl::StrCat(kPrefix, "/kv/"), "job", 1, 0); }

// Writes run "job"'s record and `n` keys "a/<i>" with `value`, 128 per Txn.
void WriteRun(etcd::Client& c, int n, const std::string& value) {
  state::RunRecord r;
  r.run_id = "job";
  r.incarnation = 1;
  r.seq = 1;
  r.state = "joining";
  r.store_only = true;
  REQUIRE(c.Put(absl::StrCat(kPrefix, "/runs/job"), state::EncodeRunRecord(r)).ok());
  for (int i = 0; i < n;) {
    etcd::Txn txn;
    for (int k = 0; k < 128 && i < n; ++k, ++i) {
      txn.success.push_back(etcd::Op::Put(absl::StrFormat("%sa/%06d", KeyBase(), i), value));
    }
    REQUIRE(c.Transact(txn).ok());
  }
}

size_t KeysLoaded(const absl::StatusOr<std::vector<state::RunRecord>>& records) {
  size_t n = 0;
  for (const state::RunRecord& r : *records) n += r.keys.size();
  return n;
}

}  // namespace

TEST_CASE("etcd journal: a load reads every key once, all at one revision, while another client moves them",
          "[etcd][journal]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  auto writer = TestClient(TestClientOptions(cluster, {1, 2, 0}));
  auto reader = TestClient(TestClientOptions(cluster, {0, 1, 2}));
  REQUIRE((writer && reader));
  constexpr int kKeys = 3000;
  WriteRun(*writer, kKeys, std::string(100, 'v'));
  // Small pages: the load takes many reads, and the mover runs between them.
  state::etcd::JournalOptions jo;
  jo.page_bytes = 4096;
  state::etcd::ElectionOptions eo;
  eo.prefix = absl::StrCat(kPrefix, "/election/");
  state::etcd::Election election(reader.get(), eo);
  auto journal = state::etcd::MakeEtcdJournal(reader.get(), &election, absl::StrCat(kPrefix, "/runs/"),
                                              absl::StrCat(kPrefix, "/kv/"), jo);
  // Moves key a/<i> to z/<i> (after every a/ in key order), one per Txn: at
  // any one revision there are kKeys keys. A load that read its pages at
  // different revisions would see early a/ keys and late z/ keys both.
  std::atomic<bool> stop{false};
  std::atomic<int> moved{0};
  std::thread mover([&] {
    for (int i = 0; i < kKeys && !stop; ++i) {
      etcd::Txn txn;
      txn.success.push_back(etcd::Op::Delete(absl::StrFormat("%sa/%06d", KeyBase(), i)));
      txn.success.push_back(etcd::Op::Put(absl::StrFormat("%sz/%06d", KeyBase(), i), "moved"));
      if (!writer->Transact(txn).ok()) break;
      ++moved;
    }
  });
  REQUIRE(WaitFor([&] { return moved >= 10; }, 10));
  const int before = moved;
  absl::StatusOr<std::vector<state::RunRecord>> records = journal->Load();
  const int after = moved;
  stop = true;
  mover.join();
  REQUIRE_MSG(records.ok(), records.status().message());
  INFO("keys moved during the load: " << after - before);
  CHECK(after > before);  // The load ran while keys moved.
  CHECK(KeysLoaded(records) == kKeys);
}

TEST_CASE("etcd journal: pages follow the keys' size, and a page too big for the client is read in halves",
          "[etcd][journal]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  auto writer = TestClient(TestClientOptions(cluster));
  etcd::ClientOptions small = TestClientOptions(cluster);
  small.max_receive_bytes = 256 << 10;
  auto reader = TestClient(small);
  REQUIRE((writer && reader));
  // 2,000 small keys, then 12 of 100 KiB each: a page sized by the small
  // keys' mean holds far more than 256 KiB once it reaches the big ones.
  WriteRun(*writer, 2000, std::string(40, 's'));
  for (int i = 0; i < 12; ++i) {
    REQUIRE(writer->Put(absl::StrFormat("%sb/%06d", KeyBase(), i), std::string(100 << 10, 'B')).ok());
  }
  state::etcd::JournalOptions jo;
  jo.page_bytes = 1 << 20;
  state::etcd::ElectionOptions eo;
  eo.prefix = absl::StrCat(kPrefix, "/election/");
  state::etcd::Election election(reader.get(), eo);
  auto journal = state::etcd::MakeEtcdJournal(reader.get(), &election, absl::StrCat(kPrefix, "/runs/"),
                                              absl::StrCat(kPrefix, "/kv/"), jo);
  absl::StatusOr<std::vector<state::RunRecord>> records = journal->Load();
  REQUIRE_MSG(records.ok(), records.status().message());
  REQUIRE(records->size() == 1);
  CHECK(KeysLoaded(records) == 2012);
  size_t big = 0;
  for (const state::StoredKey& k : (*records)[0].keys) big += k.value.size() == (100 << 10) ? 1 : 0;
  CHECK(big == 12);
}

TEST_CASE("etcd journal: a store write of thousands of keys is one transaction, and one too big writes nothing",
          "[etcd][journal]") {
  MESHRUN_REQUIRE_ETCD();
  EtcdCluster cluster;
  REQUIRE_MSG(cluster.Start(), cluster.error());
  auto client = TestClient(TestClientOptions(cluster));
  auto reader = TestClient(TestClientOptions(cluster, {2, 1, 0}));
  REQUIRE((client && reader));
  std::unique_ptr<etcd::Election> election = LeadingElection(client.get(), kPrefix);
  auto journal = state::etcd::MakeEtcdJournal(client.get(), election.get(), absl::StrCat(kPrefix, "/runs/"),
                                              absl::StrCat(kPrefix, "/kv/"));
  // 5,000 keys (etcd allows 128 operations per list of a Txn).
  std::vector<std::pair<std::string, std::string>> set;
  for (int i = 0; i < 5000; ++i) set.emplace_back(absl::StrFormat("k%05d", i), "v");
  absl::Status saved = journal->SaveKeys("job", 1, 0, set, {});
  REQUIRE_MSG(saved.ok(), saved.message());
  // From outside: every key there, all written at one revision, with the
  // run's record (a store-only run's first write carries it).
  etcd::RangeOptions o;
  absl::StatusOr<etcd::RangeResult> keys = reader->GetPrefix(KeyBase(), o);
  REQUIRE(keys.ok());
  REQUIRE(keys->kvs.size() == 5000);
  absl::StatusOr<etcd::RangeResult> record = reader->Get(absl::StrCat(kPrefix, "/runs/job"));
  REQUIRE(record.ok());
  REQUIRE(record->kvs.size() == 1);
  size_t at_one_revision = 0;
  for (const etcd::KeyValue& kv : keys->kvs) at_one_revision += kv.mod_revision == record->kvs[0].mod_revision;
  CHECK(at_one_revision == 5000);

  // Past etcd's request size (1.5 MiB by default): refused, nothing written.
  std::vector<std::pair<std::string, std::string>> big;
  for (int i = 0; i < 400; ++i) big.emplace_back(absl::StrFormat("big%03d", i), std::string(8 << 10, 'b'));
  absl::Status s = journal->SaveKeys("job", 1, 0, big, {});
  CHECK((absl::IsResourceExhausted(s) || absl::IsInvalidArgument(s)));
  INFO(s.message());
  absl::StatusOr<etcd::RangeResult> none = reader->GetPrefix(KeyBase() + "big", o);
  REQUIRE(none.ok());
  CHECK(none->kvs.empty());
  // The fence still writes afterwards.
  CHECK(journal->SaveKeys("job", 1, 0, {{"after", "1"}}, {}).ok());

  // Run records go through the same writer, without waiting: answered in
  // the order saved; a record behind a higher seq (it holds the lower's
  // change) is answered once that one is saved, and etcd keeps the higher.
  absl::Mutex mu;
  std::vector<std::pair<int64_t, absl::Status>> answered;
  state::RunRecord r;
  r.run_id = "job";
  r.incarnation = 1;
  r.state = "running";
  for (int64_t seq : {7, 5}) {
    r.seq = seq;
    journal->SaveAsync(r, [&, seq](absl::Status st) {
      absl::MutexLock lock(&mu);
      answered.emplace_back(seq, std::move(st));
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto both = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return answered.size() == 2; };
    REQUIRE(mu.AwaitWithTimeout(absl::Condition(&both), absl::Seconds(10)));
    CHECK(answered[0].first == 7);
    CHECK(answered[1].first == 5);
    CHECK(answered[0].second.ok());
    CHECK(answered[1].second.ok());
  }
  absl::StatusOr<etcd::RangeResult> kept = reader->Get(absl::StrCat(kPrefix, "/runs/job"));
  REQUIRE(kept.ok());
  REQUIRE(kept->kvs.size() == 1);
  absl::StatusOr<state::RunRecord> decoded = state::DecodeRunRecord(kept->kvs[0].value);
  REQUIRE(decoded.ok());
  CHECK(decoded->seq == 7);
  CHECK(decoded->state == "running");
}
