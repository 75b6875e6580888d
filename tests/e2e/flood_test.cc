// Floods against a `meshrun server` with a small memory budget (256 MiB),
// one per kind of object a client can make the server hold (issue 23's
// attacks 1-6). Each checks, during and after the flood:
//   - the server's peak RSS (VmHWM) stays within 1.25x the budget (where a
//     flood's steady RSS is held to the budget, the least over 2 s of it);
//   - a real 2-node job (Gloo all-reduce workers) started during the flood
//     completes, exit 0, within 30 s;
//   - once the flood stops, RSS is back within 2x of idle plus 4 MiB within 10 s.
// The flood is tests/support/flood_client.cc, a real gRPC client.
#include <signal.h>

#include <algorithm>
#include <cstdlib>

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "tests/e2e/e2e_util.h"
#include "tests/support/subprocess.h"

using namespace meshrun::testing;

namespace {

constexpr int64_t kBudget = 256 << 20;

// Memory bounds speak of the product; under AddressSanitizer (quarantine,
// shadow memory) the figures are printed but not held to them.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kRssBounds = false;
#else
constexpr bool kRssBounds = true;
#endif

double PeakRssMiB(pid_t pid) {
  std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  size_t p = status.find("VmHWM:");
  return p == std::string::npos ? 0 : std::stod(status.substr(p + 6)) / 1024;
}

struct Flood {
  std::string mode;
  std::vector<std::string> flood_args;   // Beyond --endpoint and --mode.
  std::vector<std::string> server_args;  // Beyond the budget.
  // The flood must have been refused by the budget (not only held by the
  // per-connection caps): it reached the budget.
  bool budget_refuses = false;
  // The server's peak RSS may reach this many times the budget: what it
  // holds is charged, and the rest is calls in flight (each connection's
  // max_streams_per_connection gRPC call arenas, refused or not yet read).
  double peak_bound = 1.25;
  // When above 0: the RSS while flooded, steady, may reach this many times
  // the budget.
  double steady_bound = 0;
};

// "flood: ... refused N ..." of the flood client's last line; -1 if none.
long long RefusedCount(const std::string& out) {
  const size_t p = out.rfind("refused ");
  return p == std::string::npos ? -1 : std::atoll(out.c_str() + p + 8);
}

void RunFlood(const Flood& f) {
  const std::string dir = TempDir();
  Daemon d;
  std::vector<std::string> server = {"--limit", absl::StrCat("max_server_memory=", kBudget)};
  server.insert(server.end(), f.server_args.begin(), f.server_args.end());
  StartDaemon(d, dir, {}, server);
  const std::string endpoint = absl::StrCat("127.0.0.1:", d.port);
  // Idle: after the server has served a first call (a status query).
  RunResult st = RunCommand({MeshrunBinary(), "status", "--rdzv_endpoint=" + endpoint}, {}, 20);
  REQUIRE(st.exit_code == 0);
  const double idle = d.RssMiB();

  std::vector<std::string> flood = {FLOOD_CLIENT_BINARY, "--endpoint=" + endpoint, "--mode=" + f.mode,
                                    "--seconds=120"};
  flood.insert(flood.end(), f.flood_args.begin(), f.flood_args.end());
  const std::string flood_out = dir + "/flood.out";
  pid_t flood_pid = StartCommand(flood, {}, flood_out, dir + "/flood.err");
  struct Stop {
    pid_t pid;
    ~Stop() {
      if (pid > 0) {
        kill(pid, SIGKILL);
        WaitCommand(pid, 10);
      }
    }
  } stop_flood{flood_pid};
  // The flood holds all the server lets it hold (or its count).
  REQUIRE(WaitFor([&] { return Contains(ReadFile(flood_out), "flood: saturated"); }, 60, 0.1));
  // A flood the budget must refuse is saturated once the server refuses: the client has
  // all its calls open before then (gRPC queues them past each connection's streams),
  // and under load the server may not have reached the budget yet.
  // (Under AddressSanitizer objects cost more than charged: not held to it.)
  if (f.budget_refuses && kRssBounds) {
    CHECK(WaitFor([&] { return RefusedCount(ReadFile(flood_out)) > 0; }, 60, 0.1));
  }
  // What the flood holds: the least RSS over 2 s of it. Calls in flight (refused ones sent
  // again at once) are not charged and come and go with the server's speed (bounded by
  // peak_bound below); a single sample caught them at 275 MiB once under the full suite's
  // load (flood 7, against 105-160 MiB steady). Held memory stays in every sample.
  double flooded = d.RssMiB();
  for (int i = 0; i < 20; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    flooded = std::min(flooded, d.RssMiB());
  }

  // A real job, during the flood.
  const std::vector<std::string> job = {"--nnodes=2", "--nproc_per_node=1", "--rdzv_endpoint=" + endpoint,
                                        "--rdzv_id=victim", "--rdzv_conf=join_timeout=30"};
  const absl::Time t0 = absl::Now();
  auto [a, b] = StartTwoNodes(dir, job, GLOO_WORKER_BINARY, 0);
  WaitBoth(a, b, 40);
  const double job_s = absl::ToDoubleSeconds(absl::Now() - t0);
  INFO("node a: " << a.err() << "\nnode b: " << b.err() << "\nflood: " << ReadFile(flood_out)
                  << "\nserver: " << d.err().substr(0, 4000));
  CHECK(a.code == 0);
  CHECK(b.code == 0);
  CHECK(job_s < 30);
  const double peak_during = PeakRssMiB(d.pid);

  // The flood stops: what it held goes, and the heap goes back.
  kill(flood_pid, SIGTERM);
  CHECK(WaitCommand(flood_pid, 30) == 0);
  stop_flood.pid = -1;
  const absl::Time stopped = absl::Now();
  // 2x idle plus 4 MiB: what glibc's arenas keep after a flood that peaked at hundreds of MiB
  // (31.1-32.7 MiB seen against 2x idle = 31.1 MiB, the flood's memory itself given back).
  const bool back = WaitFor([&] { return d.RssMiB() <= 2 * idle + 4; },
                            10 + (f.mode == "keys" || f.mode == "runs" || f.mode == "parked" ? 10 : 0), 0.2);
  const double back_s = absl::ToDoubleSeconds(absl::Now() - stopped);
  const double peak = PeakRssMiB(d.pid);
  WARN("flood " << f.mode << ": server RSS idle " << idle << " MiB, flooded " << flooded << " MiB, peak " << peak
                << " MiB (budget " << (kBudget >> 20) << " MiB); 2-node job " << job_s << " s; RSS " << d.RssMiB()
                << " MiB " << back_s << " s after the flood stopped; flood: "
                << ReadFile(flood_out).substr(ReadFile(flood_out).rfind("flood:")));
  if (kRssBounds) {
    if (f.steady_bound > 0) CHECK(flooded <= f.steady_bound * (kBudget >> 20));
    CHECK(peak_during <= f.peak_bound * (kBudget >> 20));
    CHECK(peak <= f.peak_bound * (kBudget >> 20));
    CHECK(back);
  }
}

}  // namespace

// 1. Store keys with empty values over 52 store-only runs. Keys live as long
// as their runs: here store_only_run_ttl=5 s removes them once the flood's
// writes stop, so "back to idle" is measured from the flood's end plus the
// TTL (10 s more).
TEST_CASE("flood 1: store keys stay within the memory budget, and a job still runs", "[e2e][flood]") {
  RunFlood({"keys", {"--runs=52", "--connections=2", "--count=100000000"}, {"--limit", "store_only_run_ttl=5"}});
}

// 2. Event streams with made-up node ids over 5 runs and 32 connections.
TEST_CASE("flood 2: event streams stay within the memory budget, and a job still runs", "[e2e][flood]") {
  RunFlood({"streams", {"--runs=5", "--connections=32", "--count=80000"}, {}});
}

// 3. Parked store reads in one run. 12 connections give the flood 12,288
// calls open at once (max_streams_per_connection=1,024 each), more than the
// 10,426 parked reads the budget lets non-members hold (224 MiB at 22 KiB),
// so the budget is what refuses. Calls in flight are not charged to the
// budget (they are bounded per connection; docs/performance.md, "Calls in
// flight"): each costs about 16.5 KiB in gRPC until it is parked or refused,
// so a burst filling every slot at once peaks near connections x 1,024 x
// 16.5 KiB whatever the budget. With 16 connections that burst alone is
// 264 MiB, and the peak was 262-331 MiB (once past 320 MiB in CI); with 12,
// 235-261 MiB in 6 runs.
TEST_CASE("flood 3: parked store reads stay within the memory budget, and a job still runs", "[e2e][flood]") {
  Flood f{"waits", {"--connections=12", "--count=40000"}, {}};
  f.budget_refuses = true;
  RunFlood(f);
}

// 4. Health Watch streams (a server without a token: open to anyone). 12
// connections for the reason of flood 3: 12,288 calls open at once, more
// than the 9,557 streams the budget lets non-members hold (224 MiB at 24 KiB).
TEST_CASE("flood 4: health Watch streams stay within the memory budget, and a job still runs", "[e2e][flood]") {
  Flood f{"health", {"--connections=12", "--count=20000"}, {"--limit", "max_health_watchers=100000"}};
  f.budget_refuses = true;
  RunFlood(f);
}

// 4b. Joins that wait for their round (not answered on a stream: agents
// join on theirs), each holding its gRPC call: 96,000 over 96 connections
// into 96 runs whose round never closes (issue 30 saw 1,762 MiB under a
// 256 MiB budget when each was charged as a node alone, 640 B).
TEST_CASE("flood 7: parked joins stay within the memory budget, and a job still runs", "[e2e][flood]") {
  Flood f{"parked", {"--connections=96", "--runs=96", "--count=96000"}, {}};
  f.budget_refuses = true;
  // Refused joins are re-sent at once over 96 connections: their call
  // arenas, not charged and bounded only per connection, come and go with
  // the server's speed. The peak reached 317-406 MiB (1.24-1.59x) whether
  // a parked join was charged 32 or 40 KiB, while the steady RSS, what is
  // held and charged, stayed at 105-160 MiB (docs/performance.md). Under the
  // full suite's load the server answers slower and more refused joins are
  // in flight at any time: the steady RSS (its least over 2 s) was 266 and
  // 276 MiB (1.04x, 1.08x) in 2 of 5 full suites. Held to 1.5x: what is
  // charged plus a load-dependent share of calls in flight; the peak to 2x,
  // against the 6.9x (1,762 MiB) this flood reached when joins were charged
  // as nodes.
  f.peak_bound = 2.0;
  f.steady_bound = 1.5;
  RunFlood(f);
}

// 5. Made-up nodes' event streams on the victim job's run id.
TEST_CASE("flood 5: made-up nodes' streams on a job's run id do not lock the job out", "[e2e][flood]") {
  RunFlood({"lockout", {"--run_id=victim", "--connections=8", "--count=16384"}, {}});
}

// 6. A store call to each of many run ids fills max_runs with store-only
// runs: a job's join removes the least recently used one.
TEST_CASE("flood 6: store-only runs filling max_runs do not lock new jobs out", "[e2e][flood]") {
  RunFlood({"runs", {"--connections=4", "--count=1100"}, {"--limit", "store_only_run_ttl=5",
                                                          "--limit", "max_runs_per_connection=1024"}});
}
