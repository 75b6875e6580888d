#include "rendezvous/store/request_records.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/store.h"

namespace meshrun::rendezvous {

absl::Status RequestRecords::CheckRequestId(absl::string_view request_id) {
  if (static_cast<int64_t>(request_id.size()) <= kMaxRequestIdBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("request_id of ", request_id.size(), " bytes is longer than ",
                                                 kMaxRequestIdBytes, ": '", Shown(request_id), "'"));
}

std::string RequestRecords::KeyOf(absl::string_view request_id) { return absl::StrCat(kPrefix, request_id); }

bool RequestRecords::IsRecordKey(absl::string_view key) { return absl::StartsWith(key, kPrefix); }

// "<op><key length>:<key><answer>": the key's length first, as keys may hold any byte.
std::string RequestRecords::Encode(Op op, absl::string_view key, absl::string_view answer) {
  return absl::StrCat(absl::string_view(reinterpret_cast<const char*>(&op), 1), key.size(), ":", key, answer);
}

absl::StatusOr<std::optional<std::string>> RequestRecords::AnswerOf(const std::string* stored,
                                                                    absl::string_view request_id, Op op,
                                                                    absl::string_view key) {
  if (stored == nullptr) return std::nullopt;
  absl::string_view rest(*stored);
  const size_t colon = rest.find(':');
  size_t key_size = 0;
  const bool same = !rest.empty() && rest[0] == static_cast<char>(op) && colon != absl::string_view::npos &&
                    absl::SimpleAtoi(rest.substr(1, colon - 1), &key_size) &&
                    rest.size() - colon - 1 >= key_size && rest.substr(colon + 1, key_size) == key;
  if (!same) {
    return absl::InvalidArgumentError(absl::StrCat("request_id '", Shown(request_id),
                                                   "' was used for another request (",
                                                   op == Op::kAdd ? "add" : "compare_set", " of key '", Shown(key),
                                                   "' now); a request id names one request"));
  }
  return std::string(rest.substr(colon + 1 + key_size));
}

void RequestRecords::Added(int64_t round, std::string key, absl::Time now) {
  order_.push_back(Entry{now, round, std::move(key)});
}

std::vector<RequestRecords::Entry> RequestRecords::TakeEvicted(absl::Time now, int64_t more) {
  std::vector<Entry> out;
  while (!order_.empty() && (size() + more > max_records_ || order_.front().at + ttl_ < now)) {
    out.push_back(std::move(order_.front()));
    order_.pop_front();
  }
  return out;
}

void RequestRecords::PutBack(std::vector<Entry> entries) {
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) order_.push_front(std::move(*it));
}

}  // namespace meshrun::rendezvous
