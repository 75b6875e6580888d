#include "rendezvous/store/request_records.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/store.h"

namespace meshrun::rendezvous {
namespace {

// A record's value, "<op><unix ms>:<key length>:<key><answer>" (the key's
// length first, as keys may hold any byte).
struct Decoded {
  char op = 0;
  absl::Time at;
  absl::string_view key;
  absl::string_view answer;
};

std::optional<Decoded> Decode(absl::string_view stored) {
  if (stored.empty()) return std::nullopt;
  Decoded d;
  d.op = stored[0];
  absl::string_view rest = stored.substr(1);
  const size_t c1 = rest.find(':');
  int64_t ms = 0;
  if (c1 == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, c1), &ms)) return std::nullopt;
  rest = rest.substr(c1 + 1);
  const size_t c2 = rest.find(':');
  size_t key_size = 0;
  if (c2 == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, c2), &key_size)) return std::nullopt;
  rest = rest.substr(c2 + 1);
  if (rest.size() < key_size) return std::nullopt;
  d.at = absl::FromUnixMillis(ms);
  d.key = rest.substr(0, key_size);
  d.answer = rest.substr(key_size);
  return d;
}

}  // namespace

absl::Status RequestRecords::CheckRequestId(absl::string_view request_id) {
  if (static_cast<int64_t>(request_id.size()) <= kMaxRequestIdBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("request_id of ", request_id.size(), " bytes is longer than ",
                                                 kMaxRequestIdBytes, ": '", Shown(request_id), "'"));
}

std::string RequestRecords::KeyOf(absl::string_view request_id) { return absl::StrCat(kPrefix, request_id); }

bool RequestRecords::IsRecordKey(absl::string_view key) { return absl::StartsWith(key, kPrefix); }

std::string RequestRecords::Encode(Op op, absl::Time at, absl::string_view key, absl::string_view answer) {
  return absl::StrCat(absl::string_view(reinterpret_cast<const char*>(&op), 1), absl::ToUnixMillis(at), ":",
                      key.size(), ":", key, answer);
}

std::optional<absl::Time> RequestRecords::WrittenAt(absl::string_view stored) {
  std::optional<Decoded> d = Decode(stored);
  if (!d) return std::nullopt;
  return d->at;
}

absl::StatusOr<std::optional<std::string>> RequestRecords::AnswerOf(const std::string* stored,
                                                                    absl::string_view request_id, Op op,
                                                                    absl::string_view key) {
  if (stored == nullptr) return std::nullopt;
  std::optional<Decoded> d = Decode(*stored);
  if (!d || d->op != static_cast<char>(op) || d->key != key) {
    return absl::InvalidArgumentError(absl::StrCat("request_id '", Shown(request_id),
                                                   "' was used for another request (",
                                                   op == Op::kAdd ? "add" : "compare_set", " of key '", Shown(key),
                                                   "' now); a request id names one request"));
  }
  return std::string(d->answer);
}

void RequestRecords::Added(int64_t round, std::string key, absl::Time at) {
  order_.push_back(Entry{at, round, std::move(key)});
  bytes_ += Cost(order_.back());
}

void RequestRecords::Restored(int64_t round, std::string key, absl::Time at) {
  Added(round, std::move(key), at);
  unsorted_ = true;
}

std::vector<RequestRecords::Entry> RequestRecords::TakeEvicted(absl::Time now, int64_t more) {
  if (unsorted_) {
    std::stable_sort(order_.begin(), order_.end(), [](const Entry& a, const Entry& b) { return a.at < b.at; });
    unsorted_ = false;
  }
  const absl::Duration youngest = std::min(ttl_, kResendWindow);
  std::vector<Entry> out;
  while (!order_.empty() && static_cast<int64_t>(out.size()) < kMaxErasedPerWrite) {
    const Entry& front = order_.front();
    const bool expired = front.at + ttl_ < now;
    const bool over = size() + more > max_records_ && front.at + youngest < now;
    if (!expired && !over) break;
    bytes_ -= Cost(front);
    out.push_back(std::move(order_.front()));
    order_.pop_front();
  }
  return out;
}

void RequestRecords::PutBack(std::vector<Entry> entries) {
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    bytes_ += Cost(*it);
    order_.push_front(std::move(*it));
  }
}

void RequestRecords::DropBelow(int64_t round) {
  for (auto it = order_.begin(); it != order_.end();) {
    if (it->round < round) {
      bytes_ -= Cost(*it);
      it = order_.erase(it);
    } else {
      ++it;
    }
  }
}

void RequestRecords::Clear() {
  order_.clear();
  bytes_ = 0;
  unsorted_ = false;
}

}  // namespace meshrun::rendezvous
