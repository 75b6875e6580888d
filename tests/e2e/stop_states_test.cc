// Agents always stop (issue 30): SIGTERM and SIGINT end an agent within 1 s
// of the signal in every state: waiting for its server, joining (in a round
// that waits for another node; also with its server frozen while a
// heartbeat waits for its answer), running workers, at the exit barrier,
// and right after a refusal. Real `meshrun server` daemons and real agents
// on loopback; each state is waited for (what the agent prints, what the
// server holds), then the signal is sent and the time to the agent's exit
// measured from outside.
#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "tests/e2e/e2e_util.h"

using namespace meshrun::testing;

namespace {

// A generous bound for an agent told to stop: past it, it is taken for hung
// (and killed by WaitCommand).
constexpr double kHungAfterS = 15;

// `v` with `last` appended.
std::vector<std::string> Plus(std::vector<std::string> v, const std::string& last) {
  v.push_back(last);
  return v;
}

// Sends `signo` to `n` and waits for its end; REQUIREs nothing (the caller
// checks). Returns the exit code (-1: hung) and the time from the signal.
std::pair<int, absl::Duration> StopAndTime(const NodeProc& n, int signo) {
  const absl::Time sent = absl::Now();
  kill(n.pid, signo);
  const int code = WaitCommand(n.pid, kHungAfterS);
  return {code, absl::Now() - sent};
}

// Whether the server listening on 127.0.0.1:`port` holds unread bytes on
// one of its connections: a request sent to it waits there (a stopped
// server reads nothing). Reads /proc/net/tcp and tcp6 (gRPC's sockets may
// be IPv4-mapped IPv6 ones) of this network namespace.
bool ServerHoldsUnread(int port) {
  std::istringstream in(ReadFile("/proc/net/tcp") + ReadFile("/proc/net/tcp6"));
  std::string line;
  char local_port[8];
  std::snprintf(local_port, sizeof local_port, ":%04X", port);
  while (std::getline(in, line)) {  // Bounded: the table's lines.
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues;
    fields >> slot >> local >> remote >> state >> queues;  // queues: "tx_queue:rx_queue", hex.
    const size_t colon = queues.find(':');
    // (A header line has no state "01".)
    if (state != "01" || !absl::EndsWith(local, local_port) || colon == std::string::npos) continue;
    if (std::strtoul(queues.c_str() + colon + 1, nullptr, 16) > 0) return true;
  }
  return false;
}

// One state: starts the agent under test (and what it needs) in `dir`,
// waits until it is in the state, and returns it; the daemon `d` (which
// the state may freeze: the test continues it). `others` collects further
// agents for the teardown.
struct State {
  std::string name;
  std::function<NodeProc(const std::string& dir, const Daemon& d, std::vector<NodeProc>* others)> enter;
  // Exit codes accepted after signal n (besides 128+n).
  std::vector<int> also_accepted;
};

std::vector<State> States() {
  return {
      {"waiting for the server",
       [](const std::string& dir, const Daemon&, std::vector<NodeProc>*) {
         // Nothing listens on this port: the agent waits for its server.
         NodeProc n = StartNode(dir, "agent",
                                {"--nnodes=1", "--rdzv_endpoint=127.0.0.1:" + std::to_string(FreePort()),
                                 "--rdzv_id=waiting", "--rdzv_conf=is_host=0,read_timeout=120", "/bin/true"},
                                {{"MESHRUN_LOG_LEVEL", "debug"}});
         REQUIRE(WaitFor([&] { return Contains(n.err(), "waiting for the rendezvous server at 127.0.0.1:"); }, 20));
         return n;
       },
       {}},
      {"joining (a round waiting for another node)",
       [](const std::string& dir, const Daemon& d, std::vector<NodeProc>*) {
         NodeProc n = StartNode(dir, "agent", Plus(DaemonClientFlags(d.port, "joining", {"--nnodes=2"}), "/bin/true"));
         REQUIRE(WaitJoined(n, "joining", 20));
         return n;
       },
       {}},
      {"joining, its server frozen with a heartbeat in flight",
       [](const std::string& dir, const Daemon& d, std::vector<NodeProc>*) {
         // keep_alive_interval=1: a heartbeat every second, each waiting at
         // least 2 s for its answer (RendezvousClient::kMinHeartbeatWait).
         std::vector<std::string> flags =
             DaemonClientFlags(d.port, "frozen", {"--nnodes=2", "--rdzv_conf=keep_alive_interval=1"});
         NodeProc n = StartNode(dir, "agent", Plus(flags, "/bin/true"));
         REQUIRE(WaitJoined(n, "frozen", 20));
         REQUIRE(kill(d.pid, SIGSTOP) == 0);
         REQUIRE(WaitFor([&] { return ServerHoldsUnread(d.port); }, 10));
         return n;
       },
       {}},
      {"running workers",
       [](const std::string& dir, const Daemon& d, std::vector<NodeProc>*) {
         std::string w = WriteScript(dir, "w.sh", "echo \"ready $RANK\"\nexec sleep 60");
         std::vector<std::string> flags = DaemonClientFlags(d.port, "running", {"--nnodes=1", "--nproc_per_node=2"});
         NodeProc n = StartNode(dir, "agent", Plus(flags, w));
         REQUIRE(WaitFor([&] { return CountOccurrences(n.out(), "ready ") == 2; }, 20));
         return n;
       },
       {}},
      {"at the exit barrier",
       [](const std::string& dir, const Daemon& d, std::vector<NodeProc>* others) {
         // The other node's worker runs on: this node's finished and waits for it.
         std::string w = WriteScript(dir, "w.sh", "echo \"ready $RANK\"\nexec sleep 60");
         others->push_back(StartNode(dir, "other", Plus(DaemonClientFlags(d.port, "barrier", {"--nnodes=2"}), w)));
         NodeProc n = StartNode(dir, "agent", Plus(DaemonClientFlags(d.port, "barrier", {"--nnodes=2"}), "/bin/true"),
                                {{"MESHRUN_LOG_LEVEL", "debug"}});
         REQUIRE(WaitFor([&] { return Contains(n.err(), "exited 0; 0 still running"); }, 20));
         return n;
       },
       {}},
      {"right after a refusal (its join and its stream refused: max_runs full)",
       [](const std::string& dir, const Daemon& d, std::vector<NodeProc>* others) {
         others->push_back(
             StartNode(dir, "occupant", Plus(DaemonClientFlags(d.port, "occupant", {"--nnodes=2"}), "/bin/true")));
         REQUIRE(WaitJoined(others->back(), "occupant", 20));
         NodeProc n = StartNode(dir, "agent", Plus(DaemonClientFlags(d.port, "refused", {"--nnodes=1"}), "/bin/true"));
         REQUIRE(WaitFor([&] { return Contains(n.err(), "meshrun: error: "); }, 20));
         return n;
       },
       // It may have ended with its own code (1) before the signal.
       {1}},
  };
}

}  // namespace

TEST_CASE("SIGTERM and SIGINT end an agent within 1 s in every state", "[e2e][signals][refusal]") {
  for (const State& st : States()) {
    for (int signo : {SIGTERM, SIGINT}) {
      DYNAMIC_SECTION(st.name << ", signal " << signo) {
        std::string dir = TempDir();
        Daemon d;
        StartDaemon(d, dir, {}, {"--limit", "max_runs=1"});
        std::vector<NodeProc> others;
        NodeProc n = st.enter(dir, d, &others);
        const auto [code, took] = StopAndTime(n, signo);
        kill(d.pid, SIGCONT);
        for (NodeProc& o : others) {
          kill(o.pid, SIGTERM);
          o.code = WaitCommand(o.pid, kHungAfterS);
        }
        INFO(st.name << ": exit " << code << " " << absl::FormatDuration(took) << " after signal " << signo
                     << "; stderr:\n" << n.err());
        const bool accepted = code == 128 + signo || std::find(st.also_accepted.begin(), st.also_accepted.end(),
                                                                 code) != st.also_accepted.end();
        CHECK(accepted);  // -1: hung, killed after kHungAfterS.
        if (kTimingBounds) CHECK(took < absl::Seconds(1));
        for (const NodeProc& o : others) CHECK(o.code != -1);
      }
    }
  }
}
