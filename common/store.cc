#include "common/store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace meshrun {

bool IsWriteOnceKey(absl::string_view key) { return absl::StartsWith(key, kWriteOncePrefix); }

std::string Shown(absl::string_view text) {
  if (text.size() <= 64) return std::string(text);
  return absl::StrCat(text.substr(0, 64), "... (", text.size(), " bytes)");
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {}

std::string PrefixStore::Full(absl::string_view key) const { return absl::StrCat(prefix_, "/", key); }

std::vector<std::string> PrefixStore::FullAll(absl::Span<const std::string> keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(Full(k));
  return out;
}

absl::Status PrefixStore::Set(absl::string_view key, absl::string_view value) {
  return base_->Set(Full(key), value);
}
absl::StatusOr<std::string> PrefixStore::Get(absl::string_view key, absl::Duration timeout) {
  return base_->Get(Full(key), timeout);
}
absl::StatusOr<int64_t> PrefixStore::Add(absl::string_view key, int64_t delta) {
  return base_->Add(Full(key), delta);
}
absl::StatusOr<Store::CompareSetResult> PrefixStore::CompareSwap(absl::string_view key, absl::string_view expected,
                                                                 absl::string_view desired) {
  return base_->CompareSwap(Full(key), expected, desired);
}
absl::Status PrefixStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  return base_->Wait(FullAll(keys), timeout);
}
absl::StatusOr<bool> PrefixStore::Check(absl::Span<const std::string> keys) {
  return base_->Check(FullAll(keys));
}
absl::StatusOr<bool> PrefixStore::Delete(absl::string_view key) { return base_->Delete(Full(key)); }
absl::StatusOr<Store::KeyList> PrefixStore::Keys(absl::string_view prefix, int64_t max_keys) {
  absl::StatusOr<KeyList> list = base_->Keys(Full(prefix), max_keys);
  if (!list.ok()) return list;
  const size_t cut = prefix_.size() + 1;  // "<prefix>/"
  for (std::string& k : list->keys) k.erase(0, cut);
  return list;
}
absl::StatusOr<std::vector<std::string>> PrefixStore::MultiGet(absl::Span<const std::string> keys,
                                                               absl::Duration timeout) {
  return base_->MultiGet(FullAll(keys), timeout);
}
absl::Status PrefixStore::MultiSet(absl::Span<const std::string> keys,
                                   absl::Span<const std::string> values) {
  return base_->MultiSet(FullAll(keys), values);
}
absl::StatusOr<std::vector<std::string>> PrefixStore::SetThenMultiGet(absl::Span<const std::string> set_keys,
                                                                      absl::Span<const std::string> set_values,
                                                                      absl::Span<const std::string> keys,
                                                                      absl::Duration timeout) {
  return base_->SetThenMultiGet(FullAll(set_keys), set_values, FullAll(keys), timeout);
}

}  // namespace meshrun
