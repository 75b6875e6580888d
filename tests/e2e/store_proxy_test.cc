// Workers reach the store through their node's agent (agent/store_proxy/store_proxy.h),
// with real meshrun processes on loopback against a `meshrun server`
// daemon whose own counts (its Status answer) show what reaches it.
#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "tests/e2e/e2e_util.h"

using namespace meshrun::testing;

namespace {

std::string Worker() { return BinaryDir() + "/tests/store_proxy_worker"; }

// The daemon's Status answer (its own counts), asked over a channel of
// this test's (one connection, made once).
meshrun::v1::StatusResponse ServerStatus(int port, const std::string& token = "") {
  static std::map<int, std::shared_ptr<grpc::Channel>> channels;
  auto& channel = channels[port];
  if (!channel) {
    channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  }
  auto stub = meshrun::v1::Admin::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  meshrun::v1::StatusRequest req;
  req.mutable_run()->set_token(token);
  meshrun::v1::StatusResponse resp;
  grpc::Status s = stub->Status(&ctx, req, &resp);
  INFO(s.error_message());
  REQUIRE(s.ok());
  return resp;
}

// Runs the `mesh` worker on 2 nodes x 8 against the daemon as run `run_id`;
// `direct`: each worker bypasses its agent (MESHRUN_STORE_ENDPOINT set to
// the server's host:port, as a worker started by hand would).
struct JobCounts {
  int64_t connections = 0;
  std::map<std::string, int64_t> requests_by_node;
  std::map<std::string, int64_t> keys_by_node;
  int64_t identical_reads = -1;
  std::string out;
};

JobCounts RunMeshJob(const Daemon& d, const std::string& dir, const std::string& run_id, bool direct) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(d.port);
  std::string prog = WriteScript(dir, run_id + ".sh",
                                 (direct ? "MESHRUN_STORE_ENDPOINT=" + endpoint + " " : std::string()) + "exec " +
                                     Worker() + " mesh");
  meshrun::v1::StatusResponse before = ServerStatus(d.port);
  auto [a, b] = StartTwoNodes(dir + (direct ? "/direct" : "/proxy"),
                              {"--nnodes=2", "--nproc_per_node=8", "--rdzv_endpoint=" + endpoint,
                               "--rdzv_id=" + run_id, "--rdzv_conf=is_host=0,join_timeout=60"},
                              prog);
  WaitBoth(a, b, 180);
  JobCounts c;
  c.out = a.out() + b.out();
  INFO(a.err() << b.err());
  REQUIRE(a.code == 0);
  REQUIRE(b.code == 0);
  REQUIRE(CountOccurrences(c.out, "store proxy mesh OK") == 16);
  meshrun::v1::StatusResponse after = ServerStatus(d.port);
  c.connections = after.connections_accepted() - before.connections_accepted();
  for (const auto& [node, n] : after.store_requests_by_node()) {
    auto it = before.store_requests_by_node().find(node);
    const int64_t delta = n - (it == before.store_requests_by_node().end() ? 0 : it->second);
    if (delta > 0) c.requests_by_node[node] = delta;
  }
  for (const auto& [node, n] : after.store_keys_read_by_node()) {
    auto it = before.store_keys_read_by_node().find(node);
    const int64_t delta = n - (it == before.store_keys_read_by_node().end() ? 0 : it->second);
    if (delta > 0) c.keys_by_node[node] = delta;
  }
  std::smatch m;
  if (std::regex_search(c.out, m, std::regex("identical_reads: requests=(\\d+)"))) {
    c.identical_reads = std::stoll(m[1]);
  }
  // Every row of the 3-D mesh agrees on one id, and rows differ.
  std::map<std::string, std::set<std::string>> ids_of_row;
  std::map<std::string, int> members_of_row;
  std::regex line("id3d rank=\\d+ dim=\\d+ row=(\\S+) id=([0-9a-f]+)");
  for (auto it = std::sregex_iterator(c.out.begin(), c.out.end(), line); it != std::sregex_iterator(); ++it) {
    ids_of_row[(*it)[1]].insert((*it)[2]);
    ++members_of_row[(*it)[1]];
  }
  CHECK(ids_of_row.size() == 8 + 8 + 4);  // dp: 8 rows of 2, pp: 8 of 2, tp: 4 of 4.
  std::set<std::string> distinct;
  for (const auto& [row, ids] : ids_of_row) {
    INFO(row);
    CHECK(ids.size() == 1);
    distinct.insert(*ids.begin());
  }
  CHECK(distinct.size() == ids_of_row.size());
  return c;
}

std::string Describe(const JobCounts& c) {
  std::string s = absl::StrCat("connections accepted ", c.connections, "; identical reads: ", c.identical_reads,
                               " requests; per node:");
  for (const auto& [node, n] : c.requests_by_node) {
    absl::StrAppend(&s, " [", node, ": ", n, " requests, ",
                    c.keys_by_node.count(node) ? c.keys_by_node.at(node) : 0, " keys read]");
  }
  return s;
}

}  // namespace

TEST_CASE("2 nodes x 8 workers, a 2-D Gloo mesh and a 3-D mesh's unique ids: the server sees O(nodes)",
          "[e2e][store_proxy]") {
  std::string dir = TempDir();
  ::mkdir((dir + "/proxy").c_str(), 0755);
  ::mkdir((dir + "/direct").c_str(), 0755);
  Daemon d;
  StartDaemon(d, dir);

  JobCounts proxy = RunMeshJob(d, dir, "through-agents", /*direct=*/false);
  JobCounts direct = RunMeshJob(d, dir, "direct", /*direct=*/true);
  std::printf("through the agents: %s\nworkers direct:     %s\n", Describe(proxy).c_str(), Describe(direct).c_str());
  INFO("through the agents: " << Describe(proxy));
  INFO("workers direct: " << Describe(direct));

  // Connections: each agent's one (its store proxy forwards over it).
  CHECK(proxy.connections <= 2 * 2);
  CHECK(direct.connections >= 2 * 8);  // Every worker its own, besides the agents'.
  // Store requests are counted per node, named by the agents; none direct.
  CHECK(proxy.requests_by_node.size() == 2);
  CHECK(proxy.requests_by_node.count("(direct)") == 0);
  CHECK(direct.requests_by_node.count("(direct)") == 1);
  // Per node: one request per worker for each collective step (its writes
  // go to the server), bounded by the node's workers, not the job's.
  for (const auto& [node, n] : proxy.requests_by_node) CHECK(n <= 3 * 8 + 4);
  // The 16 workers reading the same 3-D leaders' ids at once: answered from
  // the agents' cache or one shared read per node; 16 requests without.
  CHECK(proxy.identical_reads >= 0);
  CHECK(proxy.identical_reads <= 2);
  CHECK(direct.identical_reads >= 8);
  // Keys the server was asked to read: fewer through the agents.
  int64_t proxy_keys = 0, direct_keys = 0;
  for (const auto& [node, n] : proxy.keys_by_node) proxy_keys += n;
  for (const auto& [node, n] : direct.keys_by_node) direct_keys += n;
  CHECK(proxy_keys < direct_keys);
}

TEST_CASE("workers use the store through their agent without the token: by hand, host:port needs it",
          "[e2e][store_proxy][auth]") {
  std::string dir = TempDir();
  const std::map<std::string, std::string> token{{"MESHRUN_TOKEN", "t0ken"}};
  // The worker has no token and needs none; one of its own is not used.
  std::string check = WriteScript(dir, "check.sh",
                                  "[ -n \"$MESHRUN_TOKEN$MESHRUN_TOKEN_FILE$MESHRUN_TLS_CA\" ] && echo HAS_SECRET\n"
                                  "case \"$MESHRUN_STORE_ENDPOINT\" in unix:/*) echo UNIX_ENDPOINT;; esac\n"
                                  "MESHRUN_TOKEN=wrong exec " STORE_WORKER_BINARY);
  RunResult ok = RunCommand({MeshrunBinary(), "--standalone", "--nproc_per_node=2", check}, token, 60);
  INFO(ok.out << ok.err);
  CHECK(ok.exit_code == 0);
  CHECK(CountLines(ok.out, "set=OK get=OK") == 2);
  CHECK(CountLines(ok.out, "UNIX_ENDPOINT") == 2);
  CHECK_FALSE(Contains(ok.out, "HAS_SECRET"));

  // A worker started by hand against the server: the token is its own business.
  Daemon d;
  StartDaemon(d, dir, token);
  std::map<std::string, std::string> env{{"MESHRUN_STORE_ENDPOINT", "127.0.0.1:" + std::to_string(d.port)},
                                         {"MESHRUN_RUN_ID", "by-hand"},
                                         {"MESHRUN_ROUND", "0"},
                                         {"MESHRUN_TOKEN", "t0ken"}};
  RunResult good = RunCommand({STORE_WORKER_BINARY}, env, 30);
  INFO(good.out << good.err);
  CHECK(good.exit_code == 0);
  CHECK(Contains(good.out, "set=OK get=OK"));
  env["MESHRUN_TOKEN"] = "wrong";
  RunResult bad = RunCommand({STORE_WORKER_BINARY}, env, 30);
  CHECK(bad.exit_code == 1);
  CHECK(Contains(bad.out, "set=UNAUTHENTICATED get=UNAUTHENTICATED"));
  // Counted as direct store requests by the server.
  CHECK(ServerStatus(d.port, "t0ken").store_requests_by_node().count("(direct)") == 1);
}

TEST_CASE("a worker's store call fails at once when its agent dies, and the socket's folder is private",
          "[e2e][store_proxy]") {
  std::string dir = TempDir();
  Daemon d;
  StartDaemon(d, dir);
  NodeProc node = StartNode(dir, "node",
                            {"--nnodes=1", "--nproc_per_node=2", "--rdzv_endpoint=127.0.0.1:" + std::to_string(d.port),
                             "--rdzv_id=die", "--rdzv_conf=is_host=0", "--shutdown_timeout=8", Worker(), "wait", dir});
  bool ready = false;
  for (int i = 0; i < 300 && !ready; ++i) {
    ready = !ReadFile(dir + "/ready.0").empty() && !ReadFile(dir + "/ready.1").empty();
    if (!ready) usleep(50000);
  }
  INFO(node.err());
  REQUIRE(ready);
  // The proxy's socket lives in a folder only this user can enter.
  std::string endpoint;
  {
    // A worker's environment names it; read it from a child of the agent
    // (the shim, which passes the worker's environment on unchanged).
    std::string children = ReadFile("/proc/" + std::to_string(node.pid) + "/task/" + std::to_string(node.pid) +
                                    "/children");
    std::regex pid_re("(\\d+)");
    for (auto it = std::sregex_iterator(children.begin(), children.end(), pid_re);
         it != std::sregex_iterator() && endpoint.empty(); ++it) {
      std::string pid = (*it)[1];
      std::string e = ReadFile("/proc/" + pid + "/environ");
      for (size_t at = 0; at < e.size();) {
        size_t end = e.find('\0', at);
        std::string kv = e.substr(at, end == std::string::npos ? std::string::npos : end - at);
        if (kv.rfind("MESHRUN_STORE_ENDPOINT=unix:", 0) == 0) endpoint = kv.substr(28);
        at = end == std::string::npos ? e.size() : end + 1;
      }
    }
  }
  REQUIRE_FALSE(endpoint.empty());
  const std::string folder = endpoint.substr(0, endpoint.rfind('/'));
  // A SIGKILLed agent cannot remove its folder: the test does, pass or fail.
  struct RemoveFolder {
    std::string path;
    ~RemoveFolder() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } remove_folder{folder};
  struct stat st {};
  REQUIRE(::stat(folder.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(st.st_uid == ::getuid());

  const int64_t killed_ms = absl::ToUnixMillis(absl::Now());
  ::kill(node.pid, SIGKILL);
  WaitCommand(node.pid, 10);
  std::string results;
  for (int i = 0; i < 100; ++i) {
    results = ReadFile(dir + "/result.0") + ReadFile(dir + "/result.1");
    if (CountOccurrences(results, "code=") >= 4) break;
    usleep(50000);
  }
  INFO(results);
  std::regex re("code=(\\w+) end_ms=(\\d+) next_code=(\\w+) next_ms=(\\d+)");
  int seen = 0;
  for (auto it = std::sregex_iterator(results.begin(), results.end(), re); it != std::sregex_iterator(); ++it) {
    ++seen;
    CHECK((*it)[1] == "UNAVAILABLE");                          // The 60 s read ended...
    CHECK(std::stoll((*it)[2]) - killed_ms < 2000);           // ...at once, not at its timeout.
    CHECK((*it)[3] == "UNAVAILABLE");
    CHECK(std::stoll((*it)[4]) < 1000);                        // And the next call fails at once too.
  }
  CHECK(seen == 2);
}
