// A Store that remembers every key its user wrote, so that a mesh created
// with MeshOptions::releasable_keys can delete exactly its own keys later
// (DeviceMesh::ReleaseStoreKeys).
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/store.h"

namespace meshrun::mesh::internal {

// Forwards every call to `base`; the keys of Set, Add, MultiSet and
// SetThenMultiGet's sets are remembered whether or not the call succeeded
// (a failed call may still have reached the server); a CompareSet's key
// when the key holds its desired value afterwards (or the call failed). The set of
// keys is bounded by what the mesh's creation writes: a few keys per member
// and row (collectives never use the store). Thread-safe.
class RecordingStore : public Store {
 public:
  explicit RecordingStore(std::shared_ptr<Store> base) : base_(std::move(base)) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<CompareSetResult> CompareSwap(absl::string_view key, absl::string_view expected,
                                               absl::string_view desired) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override;
  absl::StatusOr<bool> Delete(absl::string_view key) override;
  absl::StatusOr<KeyList> Keys(absl::string_view prefix, int64_t max_keys) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(absl::Span<const std::string> keys,
                                                    absl::Duration timeout) override;
  absl::Status MultiSet(absl::Span<const std::string> keys, absl::Span<const std::string> values) override;
  absl::StatusOr<std::vector<std::string>> SetThenMultiGet(absl::Span<const std::string> set_keys,
                                                           absl::Span<const std::string> set_values,
                                                           absl::Span<const std::string> keys,
                                                           absl::Duration timeout) override;

  // Deletes every remembered key from the base store and forgets it. A key
  // whose Delete failed stays remembered, and the first such error is
  // returned (UNAVAILABLE when the server cannot be reached, ...); keys that
  // were already gone count as deleted.
  absl::Status DeleteWritten();
  // The remembered keys, sorted.
  std::vector<std::string> written() const;

 private:
  void Remember(absl::string_view key);
  void Remember(absl::Span<const std::string> keys);

  const std::shared_ptr<Store> base_;
  mutable absl::Mutex mu_;
  std::set<std::string> written_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshrun::mesh::internal
