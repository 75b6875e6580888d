// Mesh creation on Gloo with every member a thread of this process, against
// a real in-process rendezvous server: the agreement check and its requests.
#include <catch2/catch.hpp>

#include <map>
#include <thread>
#include <vector>

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

int64_t KvRequests(const std::map<std::string, int64_t>& counts) {
  int64_t n = 0;
  for (const auto& [method, count] : counts) {
    if (method.rfind("Kv", 0) == 0) n += count;
  }
  return n;
}

}  // namespace

TEST_CASE("members that agree: one store request each, two for the first; collectives work", "[mesh]") {
  auto server = StartServer();
  MeshOptions o;
  o.mesh_id = "agree";
  o.timeout = absl::Seconds(30);
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    auto mesh = InitDeviceMesh("cpu", {2, 4}, {"replicate", "shard"}, WorldOf(*server, "agree", rank), o);
    if (!mesh.ok()) return mesh.status();
    for (int d = 0; d < 2; ++d) {
      float v = 1;
      if (absl::Status s = (*mesh->GetGroup(d))->AllReduce(&v, 1); !s.ok()) return s;
      if (v != mesh->size(d)) return absl::InternalError("wrong sum");
    }
    return absl::OkStatus();
  });
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(s.ok());
  }
  auto counts = QueryRequestCounts(server->endpoint(), "");
  REQUIRE(counts.ok());
  CHECK((*counts)["KvMultiGet"] == 8);  // everyone's SetThenMultiGet
  CHECK((*counts)["KvSet"] == 1);       // the first member's verdict
  CHECK(KvRequests(*counts) == 9);
}

TEST_CASE("one member that disagrees fails every member with the same message", "[mesh]") {
  auto server = StartServer();
  MeshOptions o;
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

TEST_CASE("a member that never arrives is named by every other member at the timeout", "[mesh]") {
  auto server = StartServer();
  MeshOptions o;
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
    CHECK(s.message().find("rank 5 (coordinate (1, 1))") != absl::string_view::npos);
    CHECK(s.message().find("did not arrive within 1s") != absl::string_view::npos);
  }
}

TEST_CASE("a bad gloo_loop_nice or timeout is refused before any store traffic", "[mesh]") {
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
  CHECK(mesh.status().message() == "mesh timeout 0: must be positive");
}
