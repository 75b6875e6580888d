// The memo of the linearizability search (linearizability.cc): the
// (linearized set, model state) pairs it has reached, each packed by the
// search into a short span of uint32 words.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"

namespace meshrun::jepsen {

// A set of word spans. The spans are stored back to back in one arena and the
// hash set holds offsets into it, so that a member costs its words plus about
// 13 bytes. Not thread-safe; neither copyable nor movable (its hash functors
// point at it).
class StateCache {
 public:
  using Key = absl::Span<const uint32_t>;

  StateCache() = default;
  StateCache(const StateCache&) = delete;
  StateCache& operator=(const StateCache&) = delete;

  // Adds a copy of `key`; false (and no change) when an equal key is a member.
  bool Insert(Key key);

  // The number of members.
  int64_t size() const { return static_cast<int64_t>(offsets_.size()); }

 private:
  Key KeyAt(uint64_t offset) const { return Key(arena_.data() + offset + 1, arena_[offset]); }

  // Hash and equality over offsets and spans alike (heterogeneous lookup).
  struct Hash {
    using is_transparent = void;
    const StateCache* cache;
    size_t operator()(uint64_t offset) const;
    size_t operator()(Key key) const;
  };
  struct Eq {
    using is_transparent = void;
    const StateCache* cache;
    Key View(uint64_t offset) const { return cache->KeyAt(offset); }
    Key View(Key key) const { return key; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return View(a) == View(b);
    }
  };

  std::vector<uint32_t> arena_;  // Per member: its length, then its words.
  absl::flat_hash_set<uint64_t, Hash, Eq> offsets_{0, Hash{this}, Eq{this}};
};

}  // namespace meshrun::jepsen
