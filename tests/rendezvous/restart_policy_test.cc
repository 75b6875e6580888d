// RestartPolicy (rendezvous/run/restart_policy.h): the job-wide budget, the
// root cause, permanent failures, and what a failover restores.
#include <catch2/catch.hpp>

#include "rendezvous/run/restart_policy.h"

using meshrun::rendezvous::RestartPolicy;
using meshrun::rendezvous::WorkerFailure;

namespace {
WorkerFailure Failure(const std::string& node, bool permanent = false) {
  WorkerFailure f;
  f.node_id = node;
  f.exit_code = 3;
  f.permanent = permanent;
  return f;
}
}  // namespace

TEST_CASE("restart policy: each incident spends one restart of the job's budget, then the run fails",
          "[restart_policy]") {
  RestartPolicy p;
  CHECK(p.spent() == 0);
  CHECK_FALSE(p.has_root_cause());
  CHECK(p.AcceptFailure(Failure("a"), /*max_restarts=*/2));
  CHECK(p.spent() == 1);
  CHECK(p.root_cause().node_id == "a");
  CHECK(p.AcceptFailure(Failure("b"), 2));
  CHECK(p.spent() == 2);
  CHECK_FALSE(p.CanWaitForReplacement(2));
  // The budget is spent: the next incident fails the run, and is its root cause.
  CHECK_FALSE(p.AcceptFailure(Failure("c"), 2));
  CHECK(p.spent() == 2);
  CHECK(p.root_cause().node_id == "c");
}

TEST_CASE("restart policy: a permanent failure is never restarted, budget or not", "[restart_policy]") {
  RestartPolicy p;
  CHECK_FALSE(p.AcceptFailure(Failure("a", /*permanent=*/true), /*max_restarts=*/5));
  CHECK(p.spent() == 0);
  CHECK(p.root_cause().permanent);
  CHECK(p.CanWaitForReplacement(5));
}

TEST_CASE("restart policy: a lost node's cause is recorded without a restart, and a failover restores both",
          "[restart_policy]") {
  RestartPolicy p;
  p.Record(Failure("lost"));
  CHECK(p.spent() == 0);
  CHECK(p.root_cause().node_id == "lost");
  RestartPolicy next;
  next.Restore(p.spent() + 1, p.root_cause());
  CHECK(next.spent() == 1);
  CHECK(next.has_root_cause());
  CHECK(next.root_cause().node_id == "lost");
  next.Restore(0, std::nullopt);
  CHECK_FALSE(next.has_root_cause());
}
