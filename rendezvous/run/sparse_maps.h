// Hash maps that give their memory back. An absl::flat_hash_map keeps the
// slot array of its largest size after its entries are erased: the timer's
// map of 10,000 agents' deadlines, or the traffic counters' 10,000 client
// addresses, kept about 1 MiB each after the agents left. Pure domain.
#pragma once

#include <cstddef>

namespace meshrun::rendezvous {

// Re-allocates `map` to fit its entries when at most 1/8 of its capacity is
// used and the capacity exceeds `min_capacity` slots; otherwise does
// nothing. Call it after erasing. Amortized O(1) per erase: a shrink costs
// O(capacity) and happens only after the map has lost 7/8 of its entries
// since it last grew or shrank. Invalidates the map's iterators when it
// shrinks. Not thread-safe by itself: the caller holds the map's lock.
template <typename Map>
void ShrinkIfSparse(Map& map, size_t min_capacity = 64) {
  if (map.capacity() > min_capacity && map.size() * 8 <= map.capacity()) map.rehash(0);
}

}  // namespace meshrun::rendezvous
