// Request records (rendezvous/store/request_records.h): an add or a
// compare-set sent with a request id takes effect once, across a replica's
// restore too, within the records' bounds.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "rendezvous/store/kv_store.h"

using namespace meshrun::rendezvous;

namespace {

// A durability hook that saves at once and keeps every write it was given.
struct SavedWrites {
  struct Write {
    int64_t round;
    std::vector<std::pair<std::string, std::string>> set;
    std::vector<std::string> erase;
  };
  std::vector<Write> writes;
  void Attach(KvStore& kv) {
    kv.SetDurability(
        [this](int64_t round, const std::vector<std::pair<std::string, std::string>>& set,
               const std::vector<std::string>& erase, KvStore::SavedCallback) -> absl::StatusOr<bool> {
          writes.push_back({round, set, erase});
          return true;
        },
        [](int64_t) {});
  }
  // What etcd would hold after these writes, in order.
  std::vector<std::pair<std::string, std::string>> Held() const {
    std::vector<std::pair<std::string, std::string>> held;
    for (const Write& w : writes) {
      for (const auto& [k, v] : w.set) {
        std::erase_if(held, [&](const auto& kv) { return kv.first == k; });
        held.emplace_back(k, v);
      }
      for (const std::string& k : w.erase) std::erase_if(held, [&](const auto& kv) { return kv.first == k; });
    }
    return held;
  }
};

std::string Value(KvStore& kv, const std::string& key) {
  std::string out = "(absent)";
  kv.Await(0, {key}, absl::ZeroDuration(), [&](absl::StatusOr<std::vector<std::string>> v) {
    if (v.ok()) out = v->front();
  });
  return out;
}

}  // namespace

TEST_CASE("an add or a compare-set with a request id takes effect once, and a repeat gets the first answer",
          "[kv][request]") {
  DeadlineTimer timer;
  auto kv = std::make_shared<KvStore>("run", &timer);
  CHECK(*kv->Add(0, "n", 1, "id-1") == 1);
  CHECK(*kv->Add(0, "n", 1, "id-1") == 1);
  CHECK(Value(*kv, "n") == "1");
  CHECK(*kv->Add(0, "n", 1, "id-2") == 2);
  CHECK(*kv->Add(0, "n", 5) == 7);  // Without an id: applied each time.

  auto first = *kv->CompareSet(0, "c", "", "v1", "cas-1");
  CHECK(first == std::pair<std::string, bool>{"v1", true});
  // Sent again: the first answer, although "c" no longer holds the expected "".
  CHECK(*kv->CompareSet(0, "c", "", "v1", "cas-1") == first);
  REQUIRE(kv->Set(0, "c", "x").ok());
  CHECK(*kv->CompareSet(0, "c", "", "v1", "cas-1") == first);
  CHECK(Value(*kv, "c") == "x");
  // A compare-set that does not swap is a read: no record, a repeat reads again.
  CHECK(*kv->CompareSet(0, "c", "y", "z", "cas-2") == std::pair<std::string, bool>{"x", false});
  REQUIRE(kv->Set(0, "c", "y").ok());
  CHECK(*kv->CompareSet(0, "c", "y", "z", "cas-2") == std::pair<std::string, bool>{"z", true});

  // An id names one request: another key or operation is refused, naming it.
  absl::Status other_key = kv->Add(0, "m", 1, "id-1").status();
  CHECK(absl::IsInvalidArgument(other_key));
  CHECK(absl::StrContains(other_key.message(), "request_id 'id-1' was used for another request"));
  CHECK(absl::IsInvalidArgument(kv->CompareSet(0, "n", "1", "2", "id-1").status()));
  CHECK(Value(*kv, "m") == "(absent)");
  absl::Status long_id = kv->Add(0, "n", 1, std::string(129, 'i')).status();
  CHECK(absl::IsInvalidArgument(long_id));
  CHECK(absl::StrContains(long_id.message(), "request_id of 129 bytes is longer than 128"));

  // An add of 0 reads: no record.
  const int64_t held = kv->request_records();
  CHECK(*kv->Add(0, "n", 0, "id-0") == 7);
  CHECK(kv->request_records() == held);
  // Records are the server's own: not listed, not counted, never a client's key.
  absl::StatusOr<KvStore::KeyList> keys = kv->Keys(0, "", 100);
  REQUIRE(keys.ok());
  CHECK(keys->count == 2);  // n, c
  CHECK(kv->size() == 2);
  CHECK(kv->request_records() == 4);  // id-1, id-2, cas-1 and cas-2's swap.
  const std::string record_key = RequestRecords::KeyOf("id-1");
  absl::Status forged = kv->Set(0, record_key, "a1:n999");
  CHECK(absl::IsInvalidArgument(forged));
  CHECK(absl::StrContains(forged.message(), "keys that start with byte 0xFF are the server's own"));
  CHECK(absl::IsInvalidArgument(kv->Delete(0, record_key).status()));
  CHECK(absl::IsInvalidArgument(kv->MultiSet(0, {record_key}, {"x"})));
  CHECK(*kv->Add(0, "n", 1, "id-1") == 1);
}

TEST_CASE("a record is saved with its write, and a replica that restored the store answers a repeat with it",
          "[kv][request][durable]") {
  DeadlineTimer timer;
  auto leader = std::make_shared<KvStore>("run", &timer);
  SavedWrites saved;
  saved.Attach(*leader);
  CHECK(*leader->Add(0, "barrier", 1, "proxy-a-1") == 1);
  CHECK(*leader->CompareSet(0, "owner", "", "rank3", "proxy-a-2") == std::pair<std::string, bool>{"rank3", true});
  // One save per write, the record in it beside the key it records.
  REQUIRE(saved.writes.size() == 2);
  CHECK(saved.writes[0].set.size() == 2);
  CHECK(saved.writes[0].set[0] == std::pair<std::string, std::string>{"barrier", "1"});
  CHECK(saved.writes[0].set[1].first == RequestRecords::KeyOf("proxy-a-1"));

  // The leader dies before answering; the next one restores what was saved.
  auto next = std::make_shared<KvStore>("run", &timer);
  for (const auto& [k, v] : saved.Held()) next->Restore(0, k, v);
  CHECK(*next->Add(0, "barrier", 1, "proxy-a-1") == 1);
  CHECK(Value(*next, "barrier") == "1");
  CHECK(*next->CompareSet(0, "owner", "", "rank3", "proxy-a-2") == std::pair<std::string, bool>{"rank3", true});
  CHECK(*next->Add(0, "barrier", 1, "proxy-b-1") == 2);
  CHECK(next->Keys(0, "", 10)->count == 2);
}

TEST_CASE("records past request_record_ttl, or past max_request_records_per_run once old enough, are erased with a later write",
          "[kv][request][durable]") {
  DeadlineTimer timer;
  const absl::Time now = absl::Now();
  ServerLimits limits;
  limits.max_request_records_per_run = 2;
  auto kv = std::make_shared<KvStore>("run", &timer, limits);
  SavedWrites saved;
  saved.Attach(*kv);
  // Three records restored from etcd, out of order, written 3 to 5 minutes ago: past the
  // count, and older than the resend window.
  kv->Restore(0, "n", "3");
  auto restore = [&](const std::string& id, absl::Duration age, const std::string& answer) {
    kv->Restore(0, RequestRecords::KeyOf(id), RequestRecords::Encode(RequestRecords::Op::kAdd, now - age, "n", answer));
  };
  restore("m4", absl::Minutes(4), "2");
  restore("m5", absl::Minutes(5), "1");
  restore("m3", absl::Minutes(3), "3");
  CHECK(kv->request_records() == 3);
  CHECK(*kv->Add(0, "n", 1, "m5") == 1);  // Restored: answered from its record.
  // A new record makes room down to the count: the two oldest go, in the same save.
  CHECK(*kv->Add(0, "n", 1, "fresh-1") == 4);
  CHECK(saved.writes.back().erase ==
        std::vector<std::string>{RequestRecords::KeyOf("m5"), RequestRecords::KeyOf("m4")});
  CHECK(kv->request_records() == 2);
  CHECK(*kv->Add(0, "n", 1, "m3") == 3);  // Still recorded.
  CHECK(*kv->Add(0, "n", 1, "m5") == 5);  // Gone: applied again.
  // Records younger than the resend window are never erased by the count: it is exceeded.
  CHECK(*kv->Add(0, "n", 1, "fresh-2") == 6);
  CHECK(*kv->Add(0, "n", 1, "fresh-3") == 7);
  CHECK(kv->request_records() == 4);  // m3 made room for m5's new record; fresh-1, m5, fresh-2, fresh-3 stay.
  CHECK(*kv->Add(0, "n", 1, "fresh-1") == 4);
  CHECK(saved.Held().size() == static_cast<size_t>(1 + kv->request_records()));

  // Past the ttl: erased with the next recorded write, at most kMaxErasedPerWrite at a time.
  limits.max_request_records_per_run = 100000;
  limits.request_record_ttl = absl::Minutes(10);
  auto aging = std::make_shared<KvStore>("run", &timer, limits);
  SavedWrites aged;
  aged.Attach(*aging);
  for (int i = 0; i < 40; ++i) {
    aging->Restore(0, RequestRecords::KeyOf("old-" + std::to_string(i)),
                   RequestRecords::Encode(RequestRecords::Op::kAdd, now - absl::Minutes(11), "n", "1"));
  }
  CHECK(*aging->Add(0, "n", 1, "new-1") == 1);
  CHECK(aged.writes.back().erase.size() == RequestRecords::kMaxErasedPerWrite);
  CHECK(*aging->Add(0, "n", 1, "new-2") == 2);
  CHECK(aged.writes.back().erase.size() == 40 - RequestRecords::kMaxErasedPerWrite);
  CHECK(aging->request_records() == 2);
}

TEST_CASE("request records do not count against the run's key and byte limits, and a repeat ignores what the key holds now",
          "[kv][request]") {
  DeadlineTimer timer;
  ServerLimits limits;
  limits.max_keys_per_run = 2;
  auto kv = std::make_shared<KvStore>("run", &timer, limits);
  for (int i = 0; i < 10; ++i) CHECK(*kv->Add(0, "n", 1, "add-" + std::to_string(i)) == i + 1);
  CHECK(kv->request_records() == 10);
  REQUIRE(kv->Set(0, "second", "v").ok());
  CHECK(absl::IsResourceExhausted(kv->Set(0, "third", "v")));
  // The key changed under a recorded add: the repeat still gets its answer.
  REQUIRE(kv->Set(0, "n", "not a number").ok());
  CHECK(*kv->Add(0, "n", 1, "add-3") == 4);
  CHECK(absl::IsFailedPrecondition(kv->Add(0, "n", 1, "add-new").status()));
  // A compare-set's record keeps no value: the repeat's own desired value answers it.
  CHECK(*kv->CompareSet(0, "second", "v", std::string(4096, 'x'), "cas") ==
        std::pair<std::string, bool>{std::string(4096, 'x'), true});
  CHECK(*kv->CompareSet(0, "second", "v", std::string(4096, 'x'), "cas") ==
        std::pair<std::string, bool>{std::string(4096, 'x'), true});
}
