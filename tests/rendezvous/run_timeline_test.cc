#include <catch2/catch.hpp>

#include <string>

#include "rendezvous/run/run_timeline.h"

using meshrun::rendezvous::DescribeRootCause;
using meshrun::rendezvous::kTimelineDetailBytes;
using meshrun::rendezvous::RunTimeline;
using meshrun::rendezvous::TimelineEvent;
using meshrun::rendezvous::WorkerFailure;

TEST_CASE("a run's timeline keeps its newest entries within max_run_events, one line each, cut to size",
          "[timeline]") {
  RunTimeline t(3);
  for (int i = 0; i < 5; ++i) t.Add(absl::FromUnixSeconds(i), "round", "round " + std::to_string(i) + "\nclosed");
  REQUIRE(t.Events().size() == 3);
  CHECK(t.Events().front().detail == "round 2 closed");  // The oldest two dropped; newlines made spaces.
  CHECK(t.Events().back().time == absl::FromUnixSeconds(4));
  CHECK(t.dropped() == 2);
  t.Add(absl::Now(), "failed", std::string(1000, 'x'));
  CHECK(t.Events().back().detail.size() == kTimelineDetailBytes);
  CHECK(t.Events().back().detail.substr(kTimelineDetailBytes - 3) == "...");
  // A restore keeps the newest that fit and counts the rest as dropped.
  RunTimeline r(2);
  r.Restore({{absl::FromUnixSeconds(1), "a", "1"}, {absl::FromUnixSeconds(2), "b", "2"}, {absl::FromUnixSeconds(3), "c", "3"}},
            10);
  REQUIRE(r.Events().size() == 2);
  CHECK(r.Events()[0].kind == "b");
  CHECK(r.dropped() == 11);
}

TEST_CASE("a root cause reads as rank, node and exit, or as a lost node's message", "[timeline]") {
  WorkerFailure f;
  f.rank = 3;
  f.local_rank = 1;
  f.node_rank = 1;
  f.hostname = "host1";
  f.exit_code = 1;
  CHECK(DescribeRootCause(f) == "rank 3 (local rank 1) of node rank 1 (host1) exited with code 1");
  f.signal = 9;
  f.permanent = true;
  CHECK(DescribeRootCause(f) == "rank 3 (local rank 1) of node rank 1 (host1) was killed by signal 9 (permanent)");
  WorkerFailure lost;
  lost.message = "node host2 (node rank 1) was lost: no heartbeat for 30s";
  CHECK(DescribeRootCause(lost) == lost.message);
}
