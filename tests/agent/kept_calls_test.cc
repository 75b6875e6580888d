// KeptCalls (agent/kept_calls.h): calls kept for the next leader are sent
// again when it is named, after the retry time when it is not, and answered
// when the owner stops.
#include <catch2/catch.hpp>

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "agent/kept_calls.h"

using meshrun::agent::KeptCalls;

namespace {

// What each kept call was told, in order: 1 resend, 0 answer.
struct Log {
  absl::Mutex mu;
  std::vector<int> said;
  KeptCalls::Resend Call() {
    return [this](bool resend) {
      absl::MutexLock lock(&mu);
      said.push_back(resend ? 1 : 0);
    };
  }
  size_t Count() {
    absl::MutexLock lock(&mu);
    return said.size();
  }
  bool WaitFor(size_t n, absl::Duration within) {
    absl::MutexLock lock(&mu);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return said.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&enough), within);
  }
};

}  // namespace

TEST_CASE("kept calls: the next leader sends them all at once, exactly once", "[kept_calls]") {
  KeptCalls kept(absl::Seconds(60));
  Log log;
  kept.Add(log.Call());
  kept.Add(log.Call());
  CHECK(kept.size() == 2);
  kept.ResendAll();
  CHECK(log.said == std::vector<int>{1, 1});
  CHECK(kept.size() == 0);
  kept.ResendAll();  // Nothing kept: nothing sent twice.
  CHECK(log.Count() == 2);
}

TEST_CASE("kept calls: with no next leader, each is sent again after the retry time, not before", "[kept_calls]") {
  const absl::Duration retry = absl::Milliseconds(300);
  KeptCalls kept(retry);
  Log log;
  const absl::Time t0 = absl::Now();
  kept.Add(log.Call());
  REQUIRE(log.WaitFor(1, absl::Seconds(5)));
  const absl::Duration took = absl::Now() - t0;
  INFO("sent again after " << absl::FormatDuration(took));
  CHECK(took >= retry);
  CHECK(took < retry * 3);  // Looked at four times per retry time.
  CHECK(log.said == std::vector<int>{1});
  CHECK(kept.size() == 0);
}

TEST_CASE("kept calls: Stop answers what is kept, and what comes after, at once", "[kept_calls]") {
  KeptCalls kept(absl::Seconds(60));
  Log log;
  kept.Add(log.Call());
  kept.Stop();
  CHECK(log.said == std::vector<int>{0});
  kept.Add(log.Call());  // After Stop: answered in the caller.
  CHECK(log.said == std::vector<int>{0, 0});
  kept.ResendAll();
  kept.Stop();  // Idempotent.
  CHECK(log.Count() == 2);
}
