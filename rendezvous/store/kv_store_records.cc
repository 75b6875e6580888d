// KvStore's request records (kv_store.h, Add and CompareSet with a
// request_id; request_records.h): finding a request's recorded answer, and
// saving a write with its record while erasing the records past their
// bounds.
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/store.h"
#include "rendezvous/store/kv_store.h"

namespace meshrun::rendezvous {

absl::StatusOr<std::optional<std::string>> KvStore::RecordedLocked(int64_t round, const std::string& request_id,
                                                                   RequestRecords::Op op,
                                                                   const std::string& key) const {
  if (absl::Status s = RequestRecords::CheckRequestId(request_id); !s.ok()) return s;
  auto it = data_.find(Key{round, RequestRecords::KeyOf(request_id)});
  return RequestRecords::AnswerOf(it == data_.end() ? nullptr : &it->second, request_id, op, key);
}

absl::Status KvStore::WriteRecordedLocked(int64_t round, const std::string& key, std::string value,
                                          const std::string& request_id, RequestRecords::Op op,
                                          absl::string_view answer, Fire& fire) {
  // A record is charged to the memory budget (SyncKeyChargeLocked), not to
  // the run's limits: a client's quota never refuses the server's own key.
  if (absl::Status s = CheckWritesLocked(round, {{&key, value.size()}}); !s.ok()) return s;
  if (request_id.empty()) {
    if (write_hook_) {
      if (absl::Status s = SaveLocked(round, {{key, value}}, {}); !s.ok()) return s;
    }
    SetLocked(round, key, std::move(value), fire);
    return absl::OkStatus();
  }
  const absl::Time now = absl::Now();
  const std::string record_key = RequestRecords::KeyOf(request_id);
  std::string record = RequestRecords::Encode(op, now, key, answer);
  // The records past their bounds: erased with this write when of its
  // round, else each in a save of its own round first.
  std::vector<RequestRecords::Entry> evicted = records_.TakeEvicted(now, 1);
  std::vector<RequestRecords::Entry> with_write;  // This round's: erased with the write.
  std::vector<std::string> erase;
  for (size_t i = 0; i < evicted.size(); ++i) {
    RequestRecords::Entry& e = evicted[i];
    auto it = data_.find(Key{e.round, e.key});
    if (it == data_.end()) continue;  // Its round was dropped.
    if (e.round == round) {
      erase.push_back(e.key);
      with_write.push_back(std::move(e));
      continue;
    }
    if (write_hook_) {
      if (absl::Status s = SaveLocked(e.round, {}, {e.key}); !s.ok()) {
        // This one and those after it were not erased (none of them moved yet).
        with_write.insert(with_write.end(), std::make_move_iterator(evicted.begin() + i),
                          std::make_move_iterator(evicted.end()));
        records_.PutBack(std::move(with_write));
        return s;
      }
    }
    EraseLocked(it);
  }
  if (write_hook_) {
    if (absl::Status s = SaveLocked(round, {{key, value}, {record_key, record}}, erase); !s.ok()) {
      records_.PutBack(std::move(with_write));
      return s;
    }
  }
  for (const RequestRecords::Entry& e : with_write) EraseLocked(data_.find(Key{e.round, e.key}));
  SetLocked(round, key, std::move(value), fire);
  SetLocked(round, record_key, std::move(record), fire);
  records_.Added(round, record_key, now);
  return absl::OkStatus();
}

}  // namespace meshrun::rendezvous
