// EventOutbox (rendezvous/run/event_outbox.h): events of a durable change
// wait for its save, in the order they were made; a failed save drops them.
#include <catch2/catch.hpp>

#include <memory>

#include "rendezvous/run/event_outbox.h"
#include "tests/rendezvous/run_test_support.h"

using namespace meshrun::rendezvous;
using namespace meshrun::rendezvous::testing;

namespace {
RunEvent Event(RunEvent::Kind kind, int64_t round) {
  RunEvent e;
  e.kind = kind;
  e.round = round;
  return e;
}
}  // namespace

TEST_CASE("with no save awaited, the outbox delivers at once", "[outbox]") {
  EventOutbox box;
  auto a = std::make_shared<Recorder>();
  CHECK_FALSE(box.holding());
  box.Push({a}, Event(RunEvent::Kind::kJoinProgress, 0));
  REQUIRE(a->events.size() == 1);
  box.CloseStale(a, "lost");
  CHECK(a->closed == "lost");
}

TEST_CASE("events wait for the save they follow, and leave in the order they were made", "[outbox]") {
  EventOutbox box;
  auto a = std::make_shared<Recorder>();
  auto b = std::make_shared<Recorder>();
  box.Await(1);
  box.Push({a, b}, Event(RunEvent::Kind::kRoundClosed, 0));
  box.Await(2);
  box.Push({a}, Event(RunEvent::Kind::kRestart, 1));
  box.CloseStale(b, "node b was lost");
  CHECK(box.holding());
  CHECK(box.queued() == 3);
  CHECK(a->events.empty());
  CHECK(b->events.empty());

  box.Saved(1);  // Only what waited for record 1.
  REQUIRE(a->events.size() == 1);
  CHECK(a->events[0].kind == RunEvent::Kind::kRoundClosed);
  REQUIRE(b->events.size() == 1);
  CHECK(b->closed.empty());
  // An event made now (nothing newer awaited) still queues behind record 2's.
  box.Push({b}, Event(RunEvent::Kind::kJoinProgress, 1));
  CHECK(b->events.size() == 1);

  box.Saved(2);
  REQUIRE(a->events.size() == 2);
  CHECK(a->events[1].kind == RunEvent::Kind::kRestart);
  CHECK(b->closed == "node b was lost");
  CHECK(b->events.size() == 2);
  CHECK_FALSE(box.holding());
}

TEST_CASE("a later save releases the events of an earlier one (its record holds both changes)", "[outbox]") {
  EventOutbox box;
  auto a = std::make_shared<Recorder>();
  box.Await(5);
  box.Push({a}, Event(RunEvent::Kind::kRoundClosed, 0));
  box.Await(6);
  box.Push({a}, Event(RunEvent::Kind::kRestart, 1));
  box.Saved(6);
  CHECK(a->events.size() == 2);
  box.Saved(5);  // Late: nothing left to release, nothing twice.
  CHECK(a->events.size() == 2);
}

TEST_CASE("a failed save drops every held event for good, and ends a held stale stream as the run's", "[outbox]") {
  EventOutbox box;
  auto a = std::make_shared<Recorder>();
  auto lost = std::make_shared<Recorder>();
  box.Await(1);
  box.Push({a}, Event(RunEvent::Kind::kRestart, 1));
  box.CloseStale(lost, "node lost was lost");
  box.Fail("the save failed");
  CHECK(box.failed());
  CHECK(a->events.empty());
  // Its agent goes on with the next leader, not "lost" by a round nobody saved.
  CHECK(lost->closed == "the save failed");
  box.Saved(1);
  box.Push({a}, Event(RunEvent::Kind::kRoundClosed, 1));
  CHECK(a->events.empty());
  CHECK(box.queued() == 0);
}
