// Hash maps that give their memory back once mostly empty.
#include <catch2/catch.hpp>

#include "absl/container/flat_hash_map.h"
#include "rendezvous/run/sparse_maps.h"

using meshrun::rendezvous::ShrinkIfSparse;

TEST_CASE("sparse maps: a map that lost 7/8 of its entries shrinks to fit, a fuller one does not", "[sparse_maps]") {
  absl::flat_hash_map<int, int> m;
  for (int i = 0; i < 10000; ++i) m[i] = i;
  const size_t full = m.capacity();
  REQUIRE(full >= 10000);
  for (int i = 0; i < 7900; ++i) m.erase(i);
  ShrinkIfSparse(m);
  CHECK(m.capacity() == full);  // 2,100 of 16,383 slots: more than 1/8 used.
  for (int i = 7900; i < 9990; ++i) m.erase(i);
  ShrinkIfSparse(m);
  CHECK(m.capacity() < 64);  // 10 left.
  CHECK(m.size() == 10);
  for (int i = 9990; i < 10000; ++i) CHECK(m.at(i) == i);
  // Small maps are left alone.
  absl::flat_hash_map<int, int> small;
  for (int i = 0; i < 50; ++i) small[i] = i;
  const size_t before = small.capacity();
  for (int i = 0; i < 50; ++i) small.erase(i);
  ShrinkIfSparse(small);
  CHECK(small.capacity() == before);
}
