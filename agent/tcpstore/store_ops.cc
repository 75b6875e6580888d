#include "agent/tcpstore/store_ops.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace meshrun::agent::tcpstore {
namespace {

// The value of `key` now; empty when absent (c10d's reply for a missing key).
absl::StatusOr<std::string> ValueOrEmpty(Store& store, const std::string& key) {
  absl::StatusOr<std::string> v = store.Get(key, absl::ZeroDuration());
  if (v.ok() || !absl::IsNotFound(v.status())) return v;
  return std::string();
}

absl::Status Append(Store& store, const std::string& key, const std::string& tail, int max_tries) {
  for (int i = 0; i < max_tries; ++i) {
    absl::StatusOr<std::string> now = ValueOrEmpty(store, key);
    if (!now.ok()) return now.status();
    const std::string desired = *now + tail;
    // Done only when this call stored it: another APPEND of the same text
    // may have made the value `desired` first.
    absl::StatusOr<Store::CompareSetResult> after = store.CompareSwap(key, *now, desired);
    if (!after.ok()) return after.status();
    if (after->swapped) return absl::OkStatus();
  }
  return absl::AbortedError(absl::StrCat("APPEND to '", key.substr(0, 64), "': the value changed under each of ",
                                         max_tries, " tries"));
}

}  // namespace

absl::StatusOr<bool> ArriveAtBarrier(Store& store, Store& internal, const Request& r) {
  absl::StatusOr<int64_t> arrived = store.Add(r.keys[0], 1);
  if (!arrived.ok()) return arrived.status();
  if (*arrived < r.number) return false;
  if (absl::Status s = internal.Set(BarrierReleaseKey(r.keys[0], r.number), "1"); !s.ok()) return s;
  return true;
}

std::string BarrierReleaseKey(const std::string& key, int64_t world_size) {
  return absl::StrCat("barrier/", world_size, "/", key);
}

absl::Status NotServed(Op op) {
  return absl::UnimplementedError(absl::StrCat(
      "TCPStore request ", OpName(op), " is not served by meshrun's agent store (its store has no ",
      "key watches", " yet)"));
}

bool Executes(Op op) {
  switch (op) {
    case Op::kSet:
    case Op::kCompareSet:
    case Op::kGet:
    case Op::kAdd:
    case Op::kCheck:
    case Op::kDeleteKey:
    case Op::kAppend:
    case Op::kMultiGet:
    case Op::kMultiSet:
    case Op::kNumKeys:
    case Op::kListKeys:
    case Op::kPing: return true;
    default: return false;
  }
}

absl::StatusOr<std::string> Execute(Store& store, const Request& r, int64_t max_listed_keys, int max_append_tries) {
  std::string reply;
  switch (r.op) {
    case Op::kSet:
      if (absl::Status s = store.Set(r.keys[0], r.values[0]); !s.ok()) return s;
      return reply;
    case Op::kCompareSet: {
      absl::StatusOr<std::string> v = store.CompareSet(r.keys[0], r.values[0], r.values[1]);
      if (!v.ok()) return v.status();
      AppendBytes(&reply, *v);
      return reply;
    }
    case Op::kGet: {
      absl::StatusOr<std::string> v = ValueOrEmpty(store, r.keys[0]);
      if (!v.ok()) return v.status();
      AppendBytes(&reply, *v);
      return reply;
    }
    case Op::kAdd: {
      absl::StatusOr<int64_t> v = store.Add(r.keys[0], r.number);
      if (!v.ok()) return v.status();
      AppendI64(&reply, *v);
      return reply;
    }
    case Op::kCheck: {
      absl::StatusOr<bool> ready = r.keys.empty() ? absl::StatusOr<bool>(true) : store.Check(r.keys);
      if (!ready.ok()) return ready.status();
      AppendU8(&reply, *ready ? kReady : kNotReady);
      return reply;
    }
    case Op::kDeleteKey: {
      absl::StatusOr<bool> existed = store.Delete(r.keys[0]);
      if (!existed.ok()) return existed.status();
      AppendI64(&reply, *existed ? 1 : 0);
      return reply;
    }
    case Op::kAppend:
      if (absl::Status s = Append(store, r.keys[0], r.values[0], max_append_tries); !s.ok()) return s;
      return reply;
    case Op::kMultiGet: {
      if (r.keys.empty()) return reply;
      absl::StatusOr<std::vector<std::string>> all = store.MultiGet(r.keys, absl::ZeroDuration());
      if (all.ok()) {
        for (const std::string& v : *all) AppendBytes(&reply, v);
        return reply;
      }
      if (!absl::IsNotFound(all.status()) && !absl::IsDeadlineExceeded(all.status())) return all.status();
      // Some key is absent: each on its own, absent ones empty (c10d).
      for (const std::string& k : r.keys) {
        absl::StatusOr<std::string> v = ValueOrEmpty(store, k);
        if (!v.ok()) return v.status();
        AppendBytes(&reply, *v);
      }
      return reply;
    }
    case Op::kMultiSet:
      if (r.keys.empty()) return reply;
      if (absl::Status s = store.MultiSet(r.keys, r.values); !s.ok()) return s;
      return reply;
    case Op::kNumKeys: {
      absl::StatusOr<Store::KeyList> keys = store.Keys("", 0);
      if (!keys.ok()) return keys.status();
      AppendI64(&reply, keys->count);
      return reply;
    }
    case Op::kListKeys: {
      absl::StatusOr<Store::KeyList> keys = store.Keys("", max_listed_keys);
      if (absl::IsResourceExhausted(keys.status())) {
        return absl::ResourceExhaustedError(absl::StrCat(keys.status().message(),
                                                         " (agent_store_max_listed_keys)"));
      }
      if (!keys.ok()) return keys.status();
      AppendI64(&reply, static_cast<int64_t>(keys->keys.size()));
      for (const std::string& k : keys->keys) AppendBytes(&reply, k);
      return reply;
    }
    case Op::kPing:
      AppendU32(&reply, r.nonce);
      return reply;
    default:
      return NotServed(r.op);
  }
}

}  // namespace meshrun::agent::tcpstore
