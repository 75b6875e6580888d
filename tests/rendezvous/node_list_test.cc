#include "rendezvous/run/node_list.h"

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"

namespace meshrun::rendezvous {
namespace {

struct Item {
  struct {
    std::string node_id;
  } node;
  int value = 0;
};

Item Make(const std::string& id, int v) { return Item{{id}, v}; }

std::vector<std::string> Ids(const NodeList<Item>& l) {
  std::vector<std::string> out;
  for (const Item& i : l) out.push_back(i.node.node_id);
  return out;
}

}  // namespace

TEST_CASE("NodeList keeps insertion order and finds, erases and takes by id", "[run][node_list]") {
  NodeList<Item> l;
  CHECK(l.empty());
  // Ids longer than the small-string buffer and short ones: the index keys
  // view the ids inside the list.
  for (int i = 0; i < 5; ++i) CHECK(l.push_back(Make(absl::StrCat("host-with-a-long-name:", i), i)));
  CHECK(l.push_back(Make("s", 9)));
  CHECK_FALSE(l.push_back(Make("s", 10)));  // Held already: nothing changes.
  REQUIRE(l.size() == 6);
  CHECK(l.find("s")->value == 9);
  CHECK(l.contains("host-with-a-long-name:3"));
  CHECK(l.find("nobody") == nullptr);

  std::optional<Item> e = l.erase("host-with-a-long-name:2");
  REQUIRE(e);
  CHECK(e->value == 2);
  CHECK(e->node.node_id == "host-with-a-long-name:2");
  CHECK_FALSE(l.erase("host-with-a-long-name:2"));
  CHECK(Ids(l) == std::vector<std::string>{"host-with-a-long-name:0", "host-with-a-long-name:1",
                                           "host-with-a-long-name:3", "host-with-a-long-name:4", "s"});

  std::vector<Item> front = l.take_front(2);
  REQUIRE(front.size() == 2);
  CHECK(front[0].value == 0);
  CHECK(front[1].value == 1);
  CHECK_FALSE(l.contains("host-with-a-long-name:0"));
  CHECK(l.size() == 3);

  // Moved as a whole, the index still works.
  NodeList<Item> moved = std::move(l);
  CHECK(moved.find("host-with-a-long-name:4")->value == 4);
  CHECK(moved.erase("s")->value == 9);
  CHECK(moved.take_front(100).size() == 2);
  CHECK(moved.empty());
  CHECK(moved.push_back(Make("host-with-a-long-name:0", 7)));  // An id taken out may come back.
}

TEST_CASE("NodeList: 20,000 ids, each found and erased, in bounded time", "[run][node_list]") {
  NodeList<Item> l;
  constexpr int kN = 20000;
  for (int i = 0; i < kN; ++i) REQUIRE(l.push_back(Make(absl::StrCat("node-", i, ":12345:abcdef"), i)));
  for (int i = 0; i < kN; i += 2) REQUIRE(l.erase(absl::StrCat("node-", i, ":12345:abcdef")));
  CHECK(l.size() == kN / 2);
  for (int i = 1; i < kN; i += 2) REQUIRE(l.find(absl::StrCat("node-", i, ":12345:abcdef"))->value == i);
}

}  // namespace meshrun::rendezvous
