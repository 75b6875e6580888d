// Runs whose nodes all left before their round closed (issue 30): joins to
// distinct run ids, each cancelled by its client, fill max_runs with runs
// in `joining` that have no node. A real `meshrun server` with a small
// max_runs and a short nodeless_run_ttl: a new job is refused while they
// are held, and starts once the server has removed them.
#include <signal.h>

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "tests/e2e/e2e_util.h"
#include "tests/support/subprocess.h"

using namespace meshrun::testing;

namespace {

constexpr int kMaxRuns = 8;

// How many runs `meshrun status` lists in `state` ("joining", ...).
int RunsIn(const std::string& endpoint, const std::string& state) {
  RunResult st = RunCommand({MeshrunBinary(), "status", "--rdzv_endpoint=" + endpoint}, {}, 20);
  return st.exit_code == 0 ? CountOccurrences(st.out, ": " + state + ",") : -1;
}

}  // namespace

TEST_CASE("cancelled joins filling max_runs lock new jobs out only until nodeless_run_ttl removes their runs",
          "[e2e][flood]") {
  const std::string dir = TempDir();
  Daemon d;
  StartDaemon(d, dir, {{"MESHRUN_LOG_LEVEL", "info"}},
              {"--limit", absl::StrCat("max_runs=", kMaxRuns), "--limit", "nodeless_run_ttl=6"});
  const std::string endpoint = absl::StrCat("127.0.0.1:", d.port);

  // kMaxRuns joins of two-node rounds, each cancelled after 1 s.
  RunResult flood = RunCommand({FLOOD_CLIENT_BINARY, "--endpoint=" + endpoint, "--mode=joins", "--run_id=cancelled",
                                absl::StrCat("--count=", kMaxRuns), "--join_ms=1000", "--connections=2"},
                               {}, 40);
  INFO("flood: " << flood.out << flood.err);
  REQUIRE(flood.exit_code == 0);
  REQUIRE(Contains(flood.out, absl::StrCat("flood: joins ended ", kMaxRuns, " cancelled ", kMaxRuns, " refused 0")));
  const absl::Time cancelled_at = absl::Now();
  CHECK(RunsIn(endpoint, "joining") == kMaxRuns);

  // A new job while they are held: refused at max_runs.
  const std::vector<std::string> job = {"--nnodes=1", "--nproc_per_node=1", "--rdzv_endpoint=" + endpoint,
                                        "--rdzv_id=newjob", "--rdzv_conf=join_timeout=30", "/bin/true"};
  NodeProc refused = StartNode(dir, "refused", job);
  refused.code = WaitCommand(refused.pid, 30);
  INFO("refused job: " << refused.err() << "\nserver: " << d.err().substr(0, 4000));
  const double refused_within_s = absl::ToDoubleSeconds(absl::Now() - cancelled_at);
  // Still within the TTL, so the refusal was the held runs' doing.
  REQUIRE(refused_within_s < 5);
  CHECK(refused.code != 0);
  CHECK(Contains(refused.err(), "max_runs=" + std::to_string(kMaxRuns)));

  // The server removes them (6 s after their joins were cancelled, within a
  // further second of its sweep); waited for as a state, at most 30 s.
  REQUIRE(WaitFor([&] { return RunsIn(endpoint, "joining") == 0; }, 30, 0.5));
  CHECK(Contains(d.err(), "run 'cancelled-0' had no node and no call for 6s: removed"));
  const double removed_after_s = absl::ToDoubleSeconds(absl::Now() - cancelled_at);
  WARN("nodeless runs removed " << removed_after_s << " s after their joins were cancelled");

  // The same job now starts and finishes.
  NodeProc ok = StartNode(dir, "ok", job);
  ok.code = WaitCommand(ok.pid, 60);
  INFO("job: " << ok.err());
  CHECK(ok.code == 0);
}
