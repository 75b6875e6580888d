// ExitBarrierWaiters (rendezvous/run/exit_barrier.h): parked waiters are
// answered once, by the barrier, their timeout or a cancel, never twice.
#include <catch2/catch.hpp>

#include <atomic>

#include "absl/synchronization/notification.h"
#include "rendezvous/run/exit_barrier.h"

using meshrun::rendezvous::BarrierResult;
using meshrun::rendezvous::DeadlineTimer;
using meshrun::rendezvous::ExitBarrierWaiters;

TEST_CASE("exit barrier waiters: all taken at once, one by id, and a timeout finds none answered twice",
          "[exit_barrier]") {
  DeadlineTimer timer;
  ExitBarrierWaiters waiters(&timer);
  std::atomic<int> answered{0};
  auto count = [&](absl::StatusOr<BarrierResult>) { ++answered; };
  std::atomic<int> timeouts{0};
  const uint64_t a = waiters.Park(absl::Now() + absl::Hours(1), count, [&](uint64_t) { ++timeouts; });
  const uint64_t b = waiters.Park(absl::Now() + absl::Hours(1), count, [&](uint64_t) { ++timeouts; });
  CHECK(a != b);
  CHECK(a != 0);
  CHECK(waiters.size() == 2);
  // A cancel takes one; taking it again finds nothing.
  std::optional<ExitBarrierWaiters::Callback> cb = waiters.Take(a, /*timed_out=*/false);
  REQUIRE(cb.has_value());
  (*cb)(BarrierResult());
  CHECK_FALSE(waiters.Take(a, false).has_value());
  // The barrier completes: the rest, at once.
  for (auto& rest : waiters.TakeAll()) rest(BarrierResult());
  CHECK(answered == 2);
  CHECK(waiters.size() == 0);
  CHECK_FALSE(waiters.Take(b, true).has_value());
  CHECK(timeouts == 0);  // Their timers were cancelled.
}

TEST_CASE("exit barrier waiters: the timeout names the waiter, which is then taken once", "[exit_barrier]") {
  DeadlineTimer timer;
  ExitBarrierWaiters waiters(&timer);
  absl::Notification fired;
  std::atomic<uint64_t> fired_id{0};
  const uint64_t id = waiters.Park(absl::Now() + absl::Milliseconds(20), [](absl::StatusOr<BarrierResult>) {},
                                   [&](uint64_t w) {
                                     fired_id = w;
                                     fired.Notify();
                                   });
  REQUIRE(fired.WaitForNotificationWithTimeout(absl::Seconds(10)));
  CHECK(fired_id == id);
  CHECK(waiters.Take(id, /*timed_out=*/true).has_value());
  CHECK_FALSE(waiters.Take(id, true).has_value());
}
