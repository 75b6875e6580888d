// Mesh creation on Gloo with every member a thread of this process, against
// a real in-process rendezvous server: the agreement check and its requests,
// each case both ways: every member checking (a mesh within
// everyone_checks_up_to, 64 by default) and the first member's verdict (0).
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agreement.h"
#include "common/grpc_store.h"
#include "common/server_status.h"
#include "meshrun/device_mesh.h"
#include "rendezvous/server.h"

using namespace meshrun;
using namespace meshrun::mesh;

namespace {

std::unique_ptr<rendezvous::RendezvousServer> StartServer() {
  rendezvous::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  auto s = rendezvous::RendezvousServer::Start(o);
  REQUIRE(s.ok());
  return std::move(*s);
}

// Runs `body(rank)` for every rank in `ranks` on its own thread; returns
// each rank's status.
std::map<int, absl::Status> OnThreads(const std::vector<int>& ranks,
                                      const std::function<absl::Status(int)>& body) {
  std::map<int, absl::Status> out;
  std::vector<absl::Status> results(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) threads.emplace_back([&, i] { results[i] = body(ranks[i]); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < ranks.size(); ++i) out[ranks[i]] = results[i];
  return out;
}

World WorldOf(const rendezvous::RendezvousServer& server, const std::string& run, int rank) {
  World w;
  w.rank = rank;
  w.world_size = 8;
  w.local_rank = rank;
  w.local_world_size = 8;
  w.store_endpoint = server.endpoint();
  w.run_id = run;
  return w;
}

// Builds a (2, 4) mesh named (replicate, shard) on ranks 0..7 of `run`,
// one thread each, and runs `body` on each rank's mesh.
std::map<int, absl::Status> OnEightRanks(const rendezvous::RendezvousServer& server, const std::string& run,
                                         int everyone_checks_up_to,
                                         const std::function<absl::Status(DeviceMesh&)>& body) {
  MeshOptions o;
  o.everyone_checks_up_to = everyone_checks_up_to;
  o.mesh_id = run;
  o.timeout = absl::Seconds(30);
  return OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    auto mesh = InitDeviceMesh("cpu", {2, 4}, {"replicate", "shard"}, WorldOf(server, run, rank), o);
    if (!mesh.ok()) return mesh.status();
    return body(*mesh);
  });
}

// How many of this process's threads run at nice value `nice`
// (/proc/self/task/<tid>/stat, field 19).
int ThreadsWithNice(int nice) {
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream f(task.path() / "stat");
    std::string stat;
    std::getline(f, stat);  // A thread that just ended reads as empty (no exception).
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));  // field 3 onwards
    std::string v;
    for (int i = 3; i <= 19 && fields >> v; ++i) {
      if (i == 19 && v == std::to_string(nice)) ++n;
    }
  }
  return n;
}

int64_t KvRequests(const std::map<std::string, int64_t>& counts) {
  int64_t n = 0;
  for (const auto& [method, count] : counts) {
    if (method.rfind("Kv", 0) == 0) n += count;
  }
  return n;
}

}  // namespace

TEST_CASE("members that agree: one store request each (two for the first of a larger mesh): collectives work",
          "[mesh]") {
  const int checks = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << checks);
  auto server = StartServer();
  auto statuses = OnEightRanks(*server, "agree", checks, [](DeviceMesh& mesh) -> absl::Status {
    for (int d = 0; d < 2; ++d) {
      float v = 1;
      if (absl::Status s = (*mesh.GetGroup(d))->AllReduce(&v, 1); !s.ok()) return s;
      if (v != mesh.size(d)) return absl::InternalError("wrong sum");
    }
    // MeshOptions::gloo_loop_nice (19 by default) reached the Gloo loop
    // thread, which has turned during the collectives.
    if (ThreadsWithNice(19) < 1) return absl::InternalError("no Gloo loop thread at nice 19");
    return absl::OkStatus();
  });
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(s.ok());
  }
  // Gloo writes without MSG_NOSIGNAL: making a Gloo mesh ignores SIGPIPE.
  struct sigaction pipe {};
  REQUIRE(sigaction(SIGPIPE, nullptr, &pipe) == 0);
  CHECK(pipe.sa_handler == SIG_IGN);
  auto counts = QueryRequestCounts(server->endpoint(), "");
  REQUIRE(counts.ok());
  CHECK((*counts)["KvMultiGet"] == 8);                    // everyone's SetThenMultiGet
  CHECK((*counts)["KvCompareSet"] == (checks > 0 ? 0 : 1));  // the first member's verdict
  CHECK(KvRequests(*counts) == (checks > 0 ? 8 : 9));
}

TEST_CASE("one member that disagrees fails every member with the same message", "[mesh]") {
  auto server = StartServer();
  MeshOptions o;
  o.everyone_checks_up_to = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << o.everyone_checks_up_to);
  o.mesh_id = "mismatch";
  o.timeout = absl::Seconds(30);
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    std::vector<int> shape = rank == 3 ? std::vector<int>{4, 2} : std::vector<int>{2, 4};
    return InitDeviceMesh("cpu", shape, {"replicate", "shard"}, WorldOf(*server, "mismatch", rank), o).status();
  });
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(absl::IsFailedPrecondition(s));
    CHECK(s.message().find("mesh mismatch: rank 3 and rank 0 disagree on the shape: (4,2) vs (2,4)") !=
          absl::string_view::npos);
  }
}

TEST_CASE("the first member that disagrees with all others is named with the count", "[mesh]") {
  auto server = StartServer();
  MeshOptions o;
  o.everyone_checks_up_to = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << o.everyone_checks_up_to);
  o.mesh_id = "first";
  o.timeout = absl::Seconds(30);
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    std::vector<std::string> names = rank == 0 ? std::vector<std::string>{"dp", "tp"}
                                               : std::vector<std::string>{"replicate", "shard"};
    return InitDeviceMesh("cpu", {2, 4}, names, WorldOf(*server, "first", rank), o).status();
  });
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(absl::IsFailedPrecondition(s));
    CHECK(s.message().find("rank 1 and rank 0 disagree on the dim names: (replicate,shard) vs (dp,tp)") !=
          absl::string_view::npos);
    CHECK(s.message().find("7 of 8 members differ from rank 0") != absl::string_view::npos);
  }
}

TEST_CASE("members with other rank arrays fail with the array's digest (16 hex digits) vs 0..n-1", "[mesh]") {
  auto server = StartServer();
  MeshOptions o;
  o.everyone_checks_up_to = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << o.everyone_checks_up_to);
  o.mesh_id = "arrays";
  o.timeout = absl::Seconds(30);
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    // Rank 3's array hashes to 0x035541f57e520645: a leading zero digit.
    std::vector<int> ranks = rank == 3 ? std::vector<int>{0, 1, 2, 3, 7, 6, 4, 5} : std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7};
    return InitDeviceMeshFromRanks("cpu", ranks, {2, 4}, {"replicate", "shard"}, WorldOf(*server, "arrays", rank), o)
        .status();
  });
  const std::regex expected(
      ".*mesh mismatch: rank 3 and rank 0 disagree on the rank array: 035541f57e520645 vs 0\\.\\.7 \\(rank 3 vs rank 0\\)");
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(absl::IsFailedPrecondition(s));
    CHECK(std::regex_match(std::string(s.message()), expected));
  }
}

TEST_CASE("a member that never arrives is named by every other member at the timeout", "[mesh]") {
  auto server = StartServer();
  MeshOptions o;
  o.everyone_checks_up_to = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << o.everyone_checks_up_to);
  o.mesh_id = "absent";
  o.timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  auto statuses = OnThreads({0, 1, 2, 3, 4, 6, 7}, [&](int rank) -> absl::Status {
    return InitDeviceMesh("cpu", {2, 4}, {"replicate", "shard"}, WorldOf(*server, "absent", rank), o).status();
  });
  CHECK(absl::Now() - start < absl::Seconds(5));
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(absl::IsDeadlineExceeded(s));
    CHECK(s.message().find("rank 5 (coordinate (1, 1) in (replicate, shard))") != absl::string_view::npos);
    CHECK(s.message().find("did not arrive within 1s") != absl::string_view::npos);
  }
}

// The message after each member's own "rank R: ..." prefix, the same on all.
void CheckOneMessage(const std::map<int, absl::Status>& statuses, absl::StatusCode code, const std::string& part) {
  const std::string first(statuses.begin()->second.message().substr(statuses.begin()->second.message().find(": ") + 2));
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(s.code() == code);
    CHECK(s.message().find(part) != absl::string_view::npos);
    CHECK(s.message().substr(s.message().find(": ") + 2) == first);
  }
}

TEST_CASE("members whose rank arrays differ in order fail with one message, whichever difference each sees first",
          "[mesh]") {
  // Every member compares with the first member in its own member order:
  // rank 5 sees itself differ first, the others rank 3. One verdict stays.
  auto server = StartServer();
  MeshOptions o;
  o.everyone_checks_up_to = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << o.everyone_checks_up_to);
  o.mesh_id = "orders";
  o.timeout = absl::Seconds(30);
  const absl::Time start = absl::Now();
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    std::vector<int> ranks = rank == 3   ? std::vector<int>{0, 1, 2, 3, 7, 6, 4, 5}
                             : rank == 5 ? std::vector<int>{0, 1, 2, 5, 3, 4, 6, 7}
                                         : std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7};
    return InitDeviceMeshFromRanks("cpu", ranks, {2, 4}, {"replicate", "shard"}, WorldOf(*server, "orders", rank), o)
        .status();
  });
  CHECK(absl::Now() - start < absl::Seconds(10));
  CheckOneMessage(statuses, absl::StatusCode::kFailedPrecondition, "disagree on the rank array");
}

TEST_CASE("members that check the agreement in different ways fail with one message, not a timeout", "[mesh]") {
  // Rank 1 waits for the first member's verdict (everyone_checks_up_to 0);
  // the others check themselves: the descriptions show the difference, and
  // the verdict they record reaches rank 1.
  auto server = StartServer();
  const absl::Time start = absl::Now();
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    MeshOptions o;
    o.mesh_id = "ways";
    o.timeout = absl::Seconds(30);
    o.everyone_checks_up_to = rank == 1 ? 0 : 64;
    return InitDeviceMesh("cpu", {2, 4}, {"replicate", "shard"}, WorldOf(*server, "ways", rank), o).status();
  });
  CHECK(absl::Now() - start < absl::Seconds(10));
  CheckOneMessage(statuses, absl::StatusCode::kFailedPrecondition,
                  "rank 1 and rank 0 disagree on the everyone_checks_up_to: 0 vs 64");
}

TEST_CASE("an absent member's row peers with longer timeouts fail when the first member's wait runs out",
          "[mesh]") {
  // Rank 4 gives up after 1 s and decides rank 5's description and payload
  // absent; rank 5's row peers (1, 6, 7 read its Gloo addresses) wake then,
  // not at their own 20 s.
  auto server = StartServer();
  const absl::Time start = absl::Now();
  auto statuses = OnThreads({0, 1, 2, 3, 4, 6, 7}, [&](int rank) -> absl::Status {
    MeshOptions o;
    o.mesh_id = "peers";
    o.everyone_checks_up_to = 64;
    o.timeout = rank == 4 ? absl::Seconds(1) : absl::Seconds(20);
    return InitDeviceMesh("cpu", {2, 4}, {"replicate", "shard"}, WorldOf(*server, "peers", rank), o).status();
  });
  CHECK(absl::Now() - start < absl::Seconds(8));
  CheckOneMessage(statuses, absl::StatusCode::kDeadlineExceeded,
                  "rank 5 (coordinate (1, 1) in (replicate, shard)) did not arrive within 1s");
}

TEST_CASE("a bad gloo_loop_nice, timeout, watchdog_interval or everyone_checks_up_to is refused before any store traffic", "[mesh]") {
  auto server = StartServer();
  MeshOptions o;
  o.gloo_loop_nice = 20;
  auto mesh = InitDeviceMesh("cpu", {8}, {}, WorldOf(*server, "nice", 0), o);
  CHECK(absl::IsInvalidArgument(mesh.status()));
  CHECK(mesh.status().message() == "gloo_loop_nice 20: allowed 0 (unchanged) to 19");
  o.gloo_loop_nice = 19;
  o.timeout = absl::ZeroDuration();
  mesh = InitDeviceMesh("cpu", {8}, {}, WorldOf(*server, "nice", 0), o);
  CHECK(absl::IsInvalidArgument(mesh.status()));
  CHECK(mesh.status().message() == "mesh timeout 0: allowed 1ms to 168h");
  o.timeout = absl::InfiniteDuration();
  mesh = InitDeviceMesh("cpu", {8}, {}, WorldOf(*server, "nice", 0), o);
  CHECK(mesh.status().message() == "mesh timeout inf: allowed 1ms to 168h");
  o.timeout = absl::Seconds(5);
  o.watchdog_interval = absl::ZeroDuration();
  mesh = InitDeviceMesh("cpu", {8}, {}, WorldOf(*server, "nice", 0), o);
  CHECK(absl::IsInvalidArgument(mesh.status()));
  CHECK(mesh.status().message() == "watchdog_interval 0: allowed 1ms to 1h");
  o.watchdog_interval = absl::Milliseconds(100);
  o.everyone_checks_up_to = -1;
  mesh = InitDeviceMesh("cpu", {8}, {}, WorldOf(*server, "nice", 0), o);
  CHECK(absl::IsInvalidArgument(mesh.status()));
  CHECK(mesh.status().message() == "everyone_checks_up_to -1: allowed 0 or more members");
}

TEST_CASE("a first member that arrives after the others gave up fails with their verdict, like everyone", "[mesh]") {
  auto server = StartServer();
  MeshOptions o;
  o.everyone_checks_up_to = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << o.everyone_checks_up_to);
  o.mesh_id = "late-first";
  o.timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    if (rank == 0) absl::SleepFor(absl::Milliseconds(2500));  // past the timeout and the 0.5 s grace
    return InitDeviceMesh("cpu", {2, 4}, {"replicate", "shard"}, WorldOf(*server, "late-first", rank), o).status();
  });
  CHECK(absl::Now() - start < absl::Seconds(6));
  const std::string first_message(statuses[1].message().substr(statuses[1].message().find(": ") + 2));
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(absl::IsDeadlineExceeded(s));
    CHECK(s.message().find("rank 0 (coordinate (0, 0) in (replicate, shard)) did not arrive within 1s") !=
          absl::string_view::npos);
    // One verdict: the same message on every member (after its "rank R: ..." prefix).
    CHECK(s.message().substr(s.message().find(": ") + 2) == first_message);
  }
}

TEST_CASE("reduce-scatter gives every member its block on groups of 3 and 6, over and over", "[mesh]") {
  auto server = StartServer();
  for (std::vector<int> shape : {std::vector<int>{3}, std::vector<int>{6}, std::vector<int>{2, 3}}) {
    int n = 1;
    for (int d : shape) n *= d;
    std::vector<int> ranks;
    for (int r = 0; r < n; ++r) ranks.push_back(r);
    MeshOptions o;
    o.mesh_id = absl::StrCat("rs", n, "-", shape.size());
    o.timeout = absl::Seconds(30);
    auto statuses = OnThreads(ranks, [&](int rank) -> absl::Status {
      World w = WorldOf(*server, "rs", rank);
      w.world_size = n;
      auto mesh = InitDeviceMesh("cpu", shape, {}, w, o);
      if (!mesh.ok()) return mesh.status();
      ProcessGroup* g = *mesh->GetGroup(mesh->ndim() - 1);
      const int m = g->size();
      for (size_t count : {1, 3, 1000}) {
        for (int round = 0; round < 3; ++round) {
          // Member i contributes (i + 1) * (block index + 1) to every element of each block.
          std::vector<double> in(count * m), out(count, -1);
          for (int b = 0; b < m; ++b) {
            for (size_t k = 0; k < count; ++k) in[b * count + k] = (g->rank() + 1.0) * (b + 1);
          }
          if (absl::Status s = g->ReduceScatter(in.data(), out.data(), count, DataType::kFloat64, ReduceOp::kSum);
              !s.ok()) {
            return s;
          }
          const double want = m * (m + 1) / 2.0 * (g->rank() + 1);
          for (double v : out) {
            if (v != want) return absl::InternalError(absl::StrCat("sum block: got ", v, " want ", want));
          }
          std::vector<int64_t> in64(count * m), out64(count, -1);
          for (int b = 0; b < m; ++b) {
            for (size_t k = 0; k < count; ++k) in64[b * count + k] = g->rank() * 10 + b;
          }
          if (absl::Status s = g->ReduceScatter(in64.data(), out64.data(), count, DataType::kInt64, ReduceOp::kMax);
              !s.ok()) {
            return s;
          }
          for (int64_t v : out64) {
            if (v != (m - 1) * 10 + g->rank()) return absl::InternalError(absl::StrCat("max block: got ", v));
          }
        }
      }
      std::vector<float> none;
      return g->AllGather(none.data(), none.data(), 0, DataType::kFloat32);  // count 0: a no-op
    });
    for (const auto& [rank, s] : statuses) {
      INFO("shape size " << n << " rank " << rank << ": " << s.ToString());
      CHECK(s.ok());
    }
  }
}

TEST_CASE("flattening a flattened mesh under its own name returns it unchanged", "[mesh]") {
  auto server = StartServer();
  auto statuses = OnEightRanks(*server, "flat", MeshOptions().everyone_checks_up_to, [](DeviceMesh& mesh) -> absl::Status {
    auto flat = mesh.Flatten("all");
    if (!flat.ok()) return flat.status();
    for (const std::string& name : {std::string(), std::string("all")}) {
      auto again = flat->Flatten(name);
      if (!again.ok()) return again.status();
      if (*again->GetGroup(0) != *flat->GetGroup(0)) return absl::InternalError("another group");
    }
    float v = 1;
    if (absl::Status s = (*flat->GetGroup(0))->AllReduce(&v, 1); !s.ok()) return s;
    return v == 8 ? absl::OkStatus() : absl::InternalError(absl::StrCat("sum ", v));
  });
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(s.ok());
  }
}

TEST_CASE("an unreachable store fails mesh creation within twice the mesh timeout", "[mesh]") {
  World w;
  w.world_size = 2;
  w.store_endpoint = "127.0.0.1:1";  // nothing listens on port 1
  w.run_id = "unreachable";
  MeshOptions o;
  o.timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto mesh = InitDeviceMesh("cpu", {2}, {}, w, o);
  CHECK(absl::Now() - start < absl::Seconds(3));  // not the gRPC client's usual 10 s slack
  CHECK(absl::IsUnavailable(mesh.status()));
  CHECK(mesh.status().message().find("rendezvous store at 127.0.0.1:1 is unreachable") != absl::string_view::npos);
}

namespace {

// A store client of `run` on `server`, as a mesh member makes one.
absl::StatusOr<std::shared_ptr<Store>> StoreOf(const rendezvous::RendezvousServer& server, const std::string& run) {
  GrpcStoreOptions so;
  so.endpoint = server.endpoint();
  so.run_id = run;
  return ConnectGrpcStore(so);
}

// Every member failed with `code` and exactly `message`.
void CheckEveryMemberFails(const std::map<int, absl::Status>& statuses, absl::StatusCode code,
                           const std::string& message) {
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(s.code() == code);
    CHECK(s.message() == message);
  }
}

// The NCCL unique-id exchange of a (2, 4) mesh (replicate, shard) for
// `rank`, with `shape` in its description; ids come from a counter (the
// exchange does not look inside them; the e2e test uses real NCCL ids).
absl::StatusOr<std::vector<std::string>> ExchangeIds(const rendezvous::RendezvousServer& server,
                                                     const std::string& run, int rank, const std::string& shape,
                                                     absl::Duration timeout, int everyone_checks_up_to) {
  auto store = StoreOf(server, run);
  if (!store.ok()) return store.status();
  mesh::internal::GroupSpec replicate, shard;
  replicate.key = absl::StrCat("mesh/ids/d0/row", rank % 4);
  replicate.name = replicate.key;
  replicate.dim_name = "replicate";
  replicate.ranks = {rank % 4, rank % 4 + 4};
  replicate.group_rank = rank / 4;
  shard.key = absl::StrCat("mesh/ids/d1/row", rank / 4);
  shard.name = shard.key;
  shard.dim_name = "shard";
  for (int c = 0; c < 4; ++c) shard.ranks.push_back(rank / 4 * 4 + c);
  shard.group_rank = rank % 4;
  mesh::internal::Agreement agreement{{"cuda", "nccl", shape, "replicate,shard", rank, "world", 0, rank, ""},
                                      "mesh/ids",
                                      {0, 1, 2, 3, 4, 5, 6, 7},
                                      [](int r) { return absl::StrCat("rank ", r); },
                                      everyone_checks_up_to};
  int n = 0;
  return mesh::internal::ExchangeUniqueIds(**store, {replicate, shard}, agreement, timeout, [&] {
    return absl::StatusOr<std::string>(absl::StrCat("id-of-rank-", rank, "-", n++));
  });
}

}  // namespace

TEST_CASE("NCCL id exchange: each row gets its leader's id: one request per rank (and a larger mesh's verdict)",
          "[mesh]") {
  const int checks = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << checks);
  auto server = StartServer();
  std::map<int, std::vector<std::string>> ids;
  absl::Mutex mu;
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    auto got = ExchangeIds(*server, "ids", rank, "2,4", absl::Seconds(30), checks);
    if (!got.ok()) return got.status();
    absl::MutexLock lock(&mu);
    ids[rank] = *got;
    return absl::OkStatus();
  });
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    REQUIRE(s.ok());
  }
  for (int r = 0; r < 8; ++r) {
    CHECK(ids[r][0] == absl::StrCat("id-of-rank-", r % 4, "-0"));      // replicate: led by coordinate 0
    // shard: led by rank 0 (its second id: it leads a replicate row too) or 4.
    CHECK(ids[r][1] == (r < 4 ? "id-of-rank-0-1" : "id-of-rank-4-0"));
  }
  auto counts = QueryRequestCounts(server->endpoint(), "");
  REQUIRE(counts.ok());
  CHECK((*counts)["KvMultiGet"] == 8);
  CHECK((*counts)["KvCompareSet"] == (checks > 0 ? 0 : 1));
  CHECK(KvRequests(*counts) == (checks > 0 ? 8 : 9));
}

TEST_CASE("NCCL id exchange: one member's other shape fails every member with the same message", "[mesh]") {
  const int checks = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << checks);
  auto server = StartServer();
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    return ExchangeIds(*server, "ids-mismatch", rank, rank == 6 ? "4,2" : "2,4", absl::Seconds(30), checks).status();
  });
  CheckEveryMemberFails(statuses, absl::StatusCode::kFailedPrecondition,
                        "mesh mismatch: rank 6 and rank 0 disagree on the shape: (4,2) vs (2,4) (rank 6 vs rank 0)");
}

TEST_CASE("NCCL id exchange: a member that never arrives is named by every other member", "[mesh]") {
  const int checks = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << checks);
  auto server = StartServer();
  const absl::Time start = absl::Now();
  auto statuses = OnThreads({0, 1, 2, 3, 4, 6, 7}, [&](int rank) -> absl::Status {
    return ExchangeIds(*server, "ids-absent", rank, "2,4", absl::Seconds(1), checks).status();
  });
  CHECK(absl::Now() - start < absl::Seconds(5));
  CheckEveryMemberFails(statuses, absl::StatusCode::kDeadlineExceeded,
                        "rank 5 did not arrive within 1s");
}

namespace {

// AgreeAndExchange for rank `rank` of 8, with the description `desc` and
// row peers as in a (2, 4) mesh; payload "p<rank>".
absl::StatusOr<std::vector<std::string>> Agree(const rendezvous::RendezvousServer& server, const std::string& run,
                                               const mesh::internal::Description& desc,
                                               const std::vector<int>& read_from, absl::Duration timeout,
                                               int everyone_checks_up_to) {
  auto store = StoreOf(server, run);
  if (!store.ok()) return store.status();
  mesh::internal::Agreement agreement{desc, "mesh/a", {0, 1, 2, 3, 4, 5, 6, 7},
                                      [](int r) { return absl::StrCat("rank ", r); }, everyone_checks_up_to};
  mesh::internal::Exchange x;
  x.payload = absl::StrCat("p", desc.rank);
  x.read_from = read_from;
  x.peers = read_from;
  return mesh::internal::AgreeAndExchange(**store, agreement, x, timeout);
}

std::vector<int> RowPeers(int rank) {
  std::vector<int> peers{rank < 4 ? rank + 4 : rank - 4};
  for (int c = 0; c < 4; ++c) {
    if (rank / 4 * 4 + c != rank) peers.push_back(rank / 4 * 4 + c);
  }
  return peers;
}

}  // namespace

TEST_CASE("agreement: members on different backends get the mismatch at once, not a timeout", "[mesh]") {
  const int checks = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << checks);
  auto server = StartServer();
  const absl::Time start = absl::Now();
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    mesh::internal::Description d{"cpu", "gloo", "2,4", "replicate,shard", rank, "world", rank / 4, rank % 4, ""};
    std::vector<int> read_from = RowPeers(rank);
    if (rank == 3) {  // reads only its rows' leaders, as NCCL does
      d.device = "cuda";
      d.backend = "nccl";
      d.gpu = "0000:01:00.0";
      read_from = {0};
    }
    auto got = Agree(*server, "backends", d, read_from, absl::Seconds(30), checks);
    if (got.ok() && (*got)[0] != absl::StrCat("p", read_from[0])) return absl::InternalError("wrong payload");
    return got.status();
  });
  CHECK(absl::Now() - start < absl::Seconds(10));
  CheckEveryMemberFails(statuses, absl::StatusCode::kFailedPrecondition,
                        "mesh mismatch: rank 3 and rank 0 disagree on the device type: cuda vs cpu (rank 3 vs rank 0)");
}

TEST_CASE("agreement: two members of one node on one GPU fail every member: other nodes may reuse it", "[mesh]") {
  const int checks = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << checks);
  auto server = StartServer();
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    // Nodes of 4; local rank l on bus "l", except rank 6 (node 1, local 2) on bus "1".
    mesh::internal::Description d{"cuda", "nccl", "2,4", "replicate,shard", rank, "world", rank / 4, rank % 4,
                                  absl::StrCat("bus-", rank == 6 ? 1 : rank % 4)};
    return Agree(*server, "gpus", d, RowPeers(rank), absl::Seconds(30), checks).status();
  });
  CheckEveryMemberFails(statuses, absl::StatusCode::kFailedPrecondition,
                        "local ranks 1 and 2 of node 1 share one GPU (PCI bus bus-1); give each process its own device");
  auto fine = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    mesh::internal::Description d{"cuda", "nccl", "2,4", "replicate,shard", rank, "world", rank / 4, rank % 4,
                                  absl::StrCat("bus-", rank % 4)};
    auto got = Agree(*server, "gpus-ok", d, RowPeers(rank), absl::Seconds(30), checks);
    if (!got.ok()) return got.status();
    for (size_t k = 0; k < got->size(); ++k) {
      if ((*got)[k] != absl::StrCat("p", RowPeers(rank)[k])) return absl::InternalError("wrong payload");
    }
    return absl::OkStatus();
  });
  for (const auto& [rank, s] : fine) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(s.ok());
  }
}
