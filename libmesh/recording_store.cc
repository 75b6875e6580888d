#include "recording_store.h"

namespace meshrun::mesh::internal {

void RecordingStore::Remember(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  written_.emplace(key);
}

void RecordingStore::Remember(absl::Span<const std::string> keys) {
  absl::MutexLock lock(&mu_);
  written_.insert(keys.begin(), keys.end());
}

absl::Status RecordingStore::Set(absl::string_view key, absl::string_view value) {
  Remember(key);
  return base_->Set(key, value);
}

absl::StatusOr<std::string> RecordingStore::Get(absl::string_view key, absl::Duration timeout) {
  return base_->Get(key, timeout);
}

absl::StatusOr<int64_t> RecordingStore::Add(absl::string_view key, int64_t delta) {
  Remember(key);
  return base_->Add(key, delta);
}

absl::StatusOr<Store::CompareSetResult> RecordingStore::CompareSwap(absl::string_view key,
                                                                    absl::string_view expected,
                                                                    absl::string_view desired) {
  absl::StatusOr<CompareSetResult> stored = base_->CompareSwap(key, expected, desired);
  // Only a key that now holds this member's value: the agreement also
  // compare-sets other members' keys (an absent member's marker, a verdict
  // another member wrote first), which are theirs to release.
  if (!stored.ok() || stored->value == desired) Remember(key);
  return stored;
}

absl::Status RecordingStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  return base_->Wait(keys, timeout);
}

absl::StatusOr<bool> RecordingStore::Check(absl::Span<const std::string> keys) { return base_->Check(keys); }

absl::StatusOr<bool> RecordingStore::Delete(absl::string_view key) {
  absl::StatusOr<bool> r = base_->Delete(key);
  if (r.ok()) {
    absl::MutexLock lock(&mu_);
    written_.erase(std::string(key));
  }
  return r;
}

absl::StatusOr<Store::KeyList> RecordingStore::Keys(absl::string_view prefix, int64_t max_keys) {
  return base_->Keys(prefix, max_keys);
}

absl::StatusOr<std::vector<std::string>> RecordingStore::MultiGet(absl::Span<const std::string> keys,
                                                                  absl::Duration timeout) {
  return base_->MultiGet(keys, timeout);
}

absl::Status RecordingStore::MultiSet(absl::Span<const std::string> keys, absl::Span<const std::string> values) {
  Remember(keys);
  return base_->MultiSet(keys, values);
}

absl::StatusOr<std::vector<std::string>> RecordingStore::SetThenMultiGet(absl::Span<const std::string> set_keys,
                                                                         absl::Span<const std::string> set_values,
                                                                         absl::Span<const std::string> keys,
                                                                         absl::Duration timeout) {
  Remember(set_keys);
  return base_->SetThenMultiGet(set_keys, set_values, keys, timeout);
}

absl::Status RecordingStore::DeleteWritten() {
  absl::Status first;
  for (const std::string& key : written()) {  // Bounded: the keys remembered now.
    absl::StatusOr<bool> r = Delete(key);
    if (!r.ok() && first.ok()) first = r.status();
  }
  return first;
}

std::vector<std::string> RecordingStore::written() const {
  absl::MutexLock lock(&mu_);
  return {written_.begin(), written_.end()};
}

}  // namespace meshrun::mesh::internal
