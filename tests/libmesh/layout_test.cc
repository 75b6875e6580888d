#include <catch2/catch.hpp>

#include "launcher/launch.h"
#include "meshrun/mesh_layout.h"
#include "tests/support/subprocess.h"

using meshrun::mesh::MeshLayout;

TEST_CASE("the tutorial's (2, 4) groups", "[mesh]") {
  auto l = MeshLayout::Create({2, 4}, {"replicate", "shard"}, 8);
  REQUIRE(l.ok());
  CHECK(l->Groups(0) == std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(l->Groups(1) == std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(*l->CoordinateOf(6) == std::vector<int>{1, 2});
  CHECK(l->RowOf(0, *l->CoordinateOf(6)) == 2);
}

TEST_CASE("(2, 2, 2) groups match PyTorch's", "[mesh]") {
  auto l = MeshLayout::Create({2, 2, 2}, {"dp", "pp", "cp"}, 8);
  REQUIRE(l.ok());
  CHECK(l->Groups(0) == std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(l->Groups(1) == std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(l->Groups(2) == std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  auto flat = l->Flattened(0, 1, "dp_pp");
  CHECK(flat.Groups(0) == std::vector<std::vector<int>>{{0, 2, 4, 6}, {1, 3, 5, 7}});
}

TEST_CASE("an inferred dimension and an explicit rank array", "[mesh]") {
  auto l = MeshLayout::Create({-1, 4}, {"dp", "tp"}, 12);
  REQUIRE(l.ok());
  CHECK(l->shape() == std::vector<int>{3, 4});
  auto sub = MeshLayout::Create({2, 2}, {"a", "b"}, 8, {7, 5, 3, 1});
  REQUIRE(sub.ok());
  CHECK(*sub->CoordinateOf(3) == std::vector<int>{1, 0});
  CHECK_FALSE(sub->CoordinateOf(2).has_value());
  CHECK(sub->Groups(1) == std::vector<std::vector<int>>{{7, 5}, {3, 1}});
}

TEST_CASE("bad meshes are refused naming the values", "[mesh]") {
  auto msg = [](absl::StatusOr<MeshLayout> l) {
    REQUIRE_FALSE(l.ok());
    return std::string(l.status().message());
  };
  CHECK(msg(MeshLayout::Create({2, 4}, {}, 6)).find("(2, 4) has 8 ranks but the world size is 6") != std::string::npos);
  CHECK(msg(MeshLayout::Create({2, 4}, {"a"}, 8)).find("should have same length") != std::string::npos);
  CHECK(msg(MeshLayout::Create({2, 4}, {"a", "a"}, 8)).find("repeated mesh_dim_name 'a'") != std::string::npos);
  CHECK(msg(MeshLayout::Create({2, 4}, {"a", ""}, 8)).find("empty") != std::string::npos);
  CHECK(msg(MeshLayout::Create({-1, -1}, {}, 8)).find("at most one") != std::string::npos);
  // Found by fuzzing: the product of huge sizes overflowed (undefined behaviour).
  CHECK(msg(MeshLayout::Create({2147483647, 2147483647, 2147483647}, {}, 8)).find("has more ranks than") !=
        std::string::npos);
  CHECK(msg(MeshLayout::Create({-1, 2147483647, 2147483647, 2147483647}, {}, 8)).find("has more ranks than") !=
        std::string::npos);
  CHECK(msg(MeshLayout::Create({-1, 3}, {}, 8)).find("cannot be divided") != std::string::npos);
  CHECK(msg(MeshLayout::Create({2}, {}, 8, {1, 1})).find("twice") != std::string::npos);
  CHECK(msg(MeshLayout::Create({2}, {}, 8, {1, 9})).find("outside the world") != std::string::npos);
}

TEST_CASE("meshrun mesh prints the tutorial's picture (golden files)", "[mesh]") {
  using meshrun::testing::ReadFile;
  using meshrun::testing::SourceDir;
  auto a = MeshLayout::Create({2, 4}, {"replicate", "shard"}, 8);
  CHECK(meshrun::launcher::DescribeMesh(*a, 2, 4) == ReadFile(SourceDir() + "/tests/golden/mesh_2x4_2nodes.txt"));
  auto b = MeshLayout::Create({2, 2, 2}, {"replicate", "shard", "tp"}, 8);
  CHECK(meshrun::launcher::DescribeMesh(*b, 1, 8) == ReadFile(SourceDir() + "/tests/golden/mesh_2x2x2_1node.txt"));
  auto c = MeshLayout::Create({8}, {}, 8);
  CHECK(meshrun::launcher::DescribeMesh(*c, 2, 4) == ReadFile(SourceDir() + "/tests/golden/mesh_8_unnamed.txt"));
}

TEST_CASE("meshrun mesh: row labels wider than the dimension's name still line up", "[mesh]") {
  // 1,116 rows named "b": the last label "b=1115" is wider than "b" + 4
  // columns (once an unsigned wrap-around and a length_error; found by fuzzing).
  auto layout = MeshLayout::Create({1, 1116, 2}, {"a", "b", "c"}, 2232);
  REQUIRE(layout.ok());
  const std::string text = meshrun::launcher::DescribeMesh(*layout, 2, 1116);
  CHECK(text.find("\nb=0       0 (n0:l0)") != std::string::npos);
  CHECK(text.find("\nb=1115    2230 (n1:l1114)") != std::string::npos);
  CHECK(text.find("\n          c=0") != std::string::npos);
}
