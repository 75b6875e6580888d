#include "tests/jepsen/state_cache.h"

#include "absl/hash/hash.h"

namespace meshrun::jepsen {

size_t StateCache::Hash::operator()(uint64_t offset) const {
  return absl::HashOf(cache->KeyAt(offset));
}

size_t StateCache::Hash::operator()(Key key) const { return absl::HashOf(key); }

bool StateCache::Insert(Key key) {
  if (offsets_.contains(key)) return false;
  const uint64_t offset = arena_.size();
  arena_.push_back(static_cast<uint32_t>(key.size()));
  arena_.insert(arena_.end(), key.begin(), key.end());
  offsets_.insert(offset);
  return true;
}

}  // namespace meshrun::jepsen
