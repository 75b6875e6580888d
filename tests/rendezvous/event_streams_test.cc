// EventStreams (rendezvous/run/event_streams.h): one stream per node,
// members' and non-members', the oldest non-member's ended to make room.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "rendezvous/run/event_streams.h"

using namespace meshrun::rendezvous;

namespace {
struct Sink : EventSink {
  int pushed = 0;
  std::string how;  // "stale", "run", "evicted"
  std::string why;
  bool promoted = false;
  void Push(const RunEvent&) override { ++pushed; }
  void CloseStale(const std::string& w) override { how = "stale", why = w; }
  void CloseRun(const std::string& w) override { how = "run", why = w; }
  void CloseEvicted(const std::string& w) override { how = "evicted", why = w; }
  void PromoteToMember() override { promoted = true; }
};
std::string Why(const std::string& id, int64_t open) { return id + " of " + std::to_string(open); }
}  // namespace

TEST_CASE("event streams: one per node, members and non-members counted apart", "[event_streams]") {
  EventStreams s;
  auto a = std::make_shared<Sink>(), b = std::make_shared<Sink>(), c = std::make_shared<Sink>();
  s.Open("a", a, /*member=*/true);
  s.Open("b", b, false);
  s.Open("c", c, false);
  CHECK(s.size() == 3);
  CHECK(s.members() == 1);
  CHECK(s.nonmembers() == 2);
  CHECK(s.IsNonMember("b"));
  CHECK_FALSE(s.IsNonMember("a"));
  CHECK(s.Find("a") == a.get());
  CHECK(s.Find("x") == nullptr);
  s.PushAll(RunEvent{});
  CHECK(a->pushed == 1);
  CHECK(c->pushed == 1);

  // b joins: its stream is a member's from now on.
  s.PromoteToMember("b");
  CHECK(b->promoted);
  CHECK(s.members() == 2);
  CHECK(s.nonmembers() == 1);

  // A newer stream of a replaces the old one, which is ended.
  auto a2 = std::make_shared<Sink>();
  s.Open("a", a2, true);
  CHECK(a->how == "run");
  CHECK(a->why == "replaced by a newer event stream of node 'a'");
  CHECK(s.size() == 3);
  // The old stream's call ends later: not a's stream any more, nothing changes.
  CHECK_FALSE(s.Drop("a", a.get()));
  CHECK(s.Has("a"));
  CHECK(s.Drop("a", a2.get()));
  CHECK_FALSE(s.Has("a"));

  // A lost node's stream leaves the set at once; its end is the caller's
  // (Run ends it once the loss may be announced).
  std::shared_ptr<EventSink> removed = s.Remove("b");
  CHECK(removed.get() == b.get());
  CHECK(b->how.empty());
  CHECK_FALSE(s.Has("b"));
  CHECK(s.Remove("b") == nullptr);  // Gone already.
  CHECK(s.All().size() == static_cast<size_t>(s.size()));

  s.EndAll("server stopping");
  CHECK(c->how == "run");
  CHECK(c->why == "server stopping");
  CHECK(s.empty());
  CHECK(s.nonmembers() == 0);
}

TEST_CASE("event streams: the oldest non-member's stream is ended first, skipping those gone", "[event_streams]") {
  EventStreams s;
  auto n1 = std::make_shared<Sink>(), n2 = std::make_shared<Sink>(), n3 = std::make_shared<Sink>();
  auto m = std::make_shared<Sink>();
  s.Open("n1", n1, false);
  s.Open("m", m, true);
  s.Open("n2", n2, false);
  s.Open("n3", n3, false);
  // n1 ended by itself, n2 joined: neither is evicted.
  CHECK(s.Drop("n1", n1.get()));
  s.PromoteToMember("n2");
  std::optional<std::string> out = s.EvictOldestNonMember(Why);
  REQUIRE(out.has_value());
  CHECK(*out == "n3");
  CHECK(n3->how == "evicted");
  CHECK(n3->why == "n3 of 1");
  CHECK_FALSE(s.Has("n3"));
  CHECK_FALSE(s.EvictOldestNonMember(Why).has_value());  // Members are never evicted.
  CHECK(s.Has("m"));
  CHECK(s.Has("n2"));
  CHECK(m->how.empty());

  // A re-opened non-member's stream is the newest.
  auto p1 = std::make_shared<Sink>(), p2 = std::make_shared<Sink>(), p1b = std::make_shared<Sink>();
  s.Open("p1", p1, false);
  s.Open("p2", p2, false);
  s.Open("p1", p1b, false);
  CHECK(s.nonmembers() == 2);
  CHECK(*s.EvictOldestNonMember(Why) == "p2");
  CHECK(*s.EvictOldestNonMember(Why) == "p1");
  CHECK(p1b->how == "evicted");
}

TEST_CASE("event streams: after many short-lived non-members' streams the oldest live one is still ended first", "[event_streams]") {
  EventStreams s;
  auto keep = std::make_shared<Sink>();
  s.Open("keep", keep, false);
  for (int i = 0; i < 10000; ++i) {
    auto t = std::make_shared<Sink>();
    const std::string id = "t" + std::to_string(i);
    s.Open(id, t, false);
    REQUIRE(s.Drop(id, t.get()));
  }
  CHECK(s.nonmembers() == 1);
  CHECK(*s.EvictOldestNonMember(Why) == "keep");
  s.Release();
  CHECK(s.empty());
}
