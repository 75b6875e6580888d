// The store proxy (agent/store_proxy/store_proxy.h) between the workers' store client
// (GrpcStore over its Unix socket) and a real in-process server with a token.
#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <filesystem>
#include <future>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/store_proxy/store_proxy.h"
#include "client/grpc_store.h"
#include "client/status.h"
#include "libmesh/agreement.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "rendezvous/server.h"
#include "tests/agent/store_proxy_fixture.h"

using namespace meshrun;
using namespace meshrun::client;

using meshrun::testing::store_proxy::ServerStore;
using meshrun::testing::store_proxy::Setup;

TEST_CASE("store proxy: every store operation works for a worker with no token, counted for its node",
          "[store_proxy]") {
  Setup s;
  CHECK(absl::StartsWith(s.proxy->endpoint(), "unix:/"));
  struct stat st {};
  REQUIRE(::stat(s.proxy->directory().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  auto store = s.Worker();
  REQUIRE(store->Set("a", "1").ok());
  CHECK(*store->Get("a", absl::Seconds(1)) == "1");
  REQUIRE(store->Set("a", "2").ok());  // Mutable: the new value is read.
  CHECK(*store->Get("a", absl::ZeroDuration()) == "2");
  CHECK(*store->Add("n", 5) == 5);
  CHECK(*store->CompareSet("mesh/verdict", "", "ok") == "ok");
  CHECK(*store->CompareSet("mesh/verdict", "", "timeout") == "ok");
  CHECK(*store->Check(std::vector<std::string>{"mesh/verdict"}));  // Answered by the proxy.
  CHECK_FALSE(*store->Check(std::vector<std::string>{"mesh/absent"}));
  CHECK(*store->Delete("a"));
  CHECK(absl::IsFailedPrecondition(store->Delete("mesh/verdict").status()));
  REQUIRE(store->MultiSet(std::vector<std::string>{"mesh/x", "y"}, std::vector<std::string>{"X", "Y"}).ok());
  auto both = store->SetThenMultiGet(std::vector<std::string>{"mesh/z"}, std::vector<std::string>{"Z"},
                                     std::vector<std::string>{"mesh/x", "y", "mesh/z"}, absl::Seconds(1));
  REQUIRE(both.ok());
  CHECK(*both == std::vector<std::string>{"X", "Y", "Z"});
  CHECK(store->Wait(std::vector<std::string>{"mesh/x", "mesh/z"}, absl::Seconds(1)).ok());
  CHECK(absl::IsDeadlineExceeded(store->Get("mesh/never", absl::Milliseconds(100)).status()));
  CHECK(absl::IsNotFound(store->Get("never", absl::ZeroDuration()).status()));
  // The server saw every request as the node's, none direct.
  v1::StatusResponse status = s.ServerStatus();
  CHECK(status.store_requests_by_node().count("node-a") == 1);
  CHECK(status.store_requests_by_node().count("(direct)") == 0);
  // Per run: one run's Status counts its own nodes only.
  auto job = s.ServerStatus("job").store_requests_by_node();
  CHECK(job.size() == 1);
  CHECK(job["node-a"] == status.store_requests_by_node().at("node-a"));
  CHECK(s.ServerStatus("another-job").store_requests_by_node().empty());
  // The workers' counters come from the server, through the proxy.
  auto counts = QueryRequestCounts(s.proxy->endpoint(), "", {});
  REQUIRE(counts.ok());
  CHECK(counts->at("KvSet") >= 2);
}

TEST_CASE("store proxy: 8 workers waiting for one unique id are one server read, then it is local", "[store_proxy]") {
  Setup s;
  auto setter = s.Worker();
  auto before = s.ServerStatus().store_keys_read_by_node();
  std::vector<std::thread> workers;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    workers.emplace_back([&] {
      auto store = s.Worker();
      auto v = store->Get("mesh/m0/d0/row0/id", absl::Seconds(20));
      if (v.ok() && *v == "id-bytes") ++ok;
    });
  }
  absl::SleepFor(absl::Milliseconds(300));  // All 8 parked (bounded: the wait is 20 s).
  REQUIRE(setter->Set("mesh/m0/d0/row0/id", "id-bytes").ok());
  for (auto& t : workers) t.join();
  CHECK(ok == 8);
  CHECK(*setter->Get("mesh/m0/d0/row0/id", absl::ZeroDuration()) == "id-bytes");
  auto after = s.ServerStatus().store_keys_read_by_node();
  const int64_t keys_read = after["node-a"] - before["node-a"];
  CHECK(keys_read <= 2);  // One shared read (two if one worker came late); the last Get was local.
  agent::StoreCacheStats st = s.proxy->stats();
  CHECK(st.keys_coalesced + st.keys_from_cache >= 7);
}

TEST_CASE("store proxy: only its own run, and its folder goes with it", "[store_proxy]") {
  std::string dir;
  {
    Setup s;
    dir = s.proxy->directory();
    auto other = s.Worker("another-run");
    absl::Status refused = other->Set("k", "v");
    CHECK(absl::IsPermissionDenied(refused));
    CHECK(absl::StrContains(refused.message(), "serves run 'job' only"));
    // A new round: the old round's values are no longer answered locally.
    auto r0 = s.Worker("job", 0);
    REQUIRE(r0->Set("mesh/k", "round0").ok());
    s.proxy->SetRound(1);
    auto r1 = s.Worker("job", 1);
    CHECK(absl::IsNotFound(r1->Get("mesh/k", absl::ZeroDuration()).status()));
  }
  CHECK_FALSE(std::filesystem::exists(dir));
}

TEST_CASE("store proxy: the lighthouse's run is served too, around the cache", "[store_proxy]") {
  agent::StoreProxyOptions o;
  o.run_id = "job-group-1";
  o.shared_run_id = "job";
  Setup s(o);
  auto own = s.Worker("job-group-1");
  auto shared = s.Worker("job");
  REQUIRE(own->Set("mesh/k", "group").ok());
  REQUIRE(shared->Set("mesh/k", "job").ok());
  // Two stores: the same key in each run holds its own value, on the server too.
  CHECK(*own->Get("mesh/k", absl::ZeroDuration()) == "group");
  CHECK(*shared->Get("mesh/k", absl::ZeroDuration()) == "job");
  CHECK(*shared->MultiGet({"mesh/k"}, absl::ZeroDuration()) == std::vector<std::string>{"job"});
  CHECK(*ServerStore(s.server->endpoint())->Get("mesh/k", absl::ZeroDuration()) == "job");
  absl::Status refused = s.Worker("job-group-2")->Set("k", "v");
  CHECK(absl::IsPermissionDenied(refused));
  CHECK(absl::StrContains(refused.message(), "serves run 'job-group-1' and its lighthouse's run 'job' only"));
}

TEST_CASE("store proxy: a worker's request larger than the limit is refused", "[store_proxy]") {
  agent::StoreProxyOptions o;
  o.max_message_bytes = 64 << 10;
  Setup s(o);
  auto store = s.Worker();
  absl::Status big = store->Set("big", std::string(128 << 10, 'x'));
  CHECK(absl::IsResourceExhausted(big));
  CHECK(store->Set("small", std::string(1024, 'x')).ok());
}

TEST_CASE("store proxy: folders of killed agents are swept, live and young ones kept", "[store_proxy]") {
  std::string base = std::filesystem::temp_directory_path() / ("meshrun-sweep-" + std::to_string(::getpid()));
  std::filesystem::create_directories(base);
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } cleanup{base};
  auto make = [&](const std::string& name, bool listen, bool old) {
    std::string dir = base + "/" + name;
    std::filesystem::create_directories(dir);
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::string sock = dir + "/store.sock";
    std::strncpy(addr.sun_path, sock.c_str(), sizeof(addr.sun_path) - 1);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    if (listen) {
      REQUIRE(::listen(fd, 4) == 0);
    } else {
      ::close(fd);  // A dead agent's socket: the file stays, nobody listens.
      fd = -1;
    }
    if (old) {
      timespec times[2] = {{absl::ToUnixSeconds(absl::Now()) - 600, 0}, {absl::ToUnixSeconds(absl::Now()) - 600, 0}};
      REQUIRE(::utimensat(AT_FDCWD, dir.c_str(), times, 0) == 0);
    }
    return fd;
  };
  make("meshrun-store-dead01", false, true);
  const int live = make("meshrun-store-live01", true, true);
  make("meshrun-store-young1", false, false);
  make("other-dead", false, true);
  CHECK(agent::SweepStaleProxyDirs(base, absl::Seconds(60)) == 1);
  CHECK_FALSE(std::filesystem::exists(base + "/meshrun-store-dead01"));
  CHECK(std::filesystem::exists(base + "/meshrun-store-live01"));
  CHECK(std::filesystem::exists(base + "/meshrun-store-young1"));
  CHECK(std::filesystem::exists(base + "/other-dead"));
  ::close(live);
  // A proxy started there sweeps the same way.
  agent::StoreProxyOptions o;
  o.dir_base = base;
  make("meshrun-store-dead02", false, true);
  Setup s(o);
  CHECK_FALSE(std::filesystem::exists(base + "/meshrun-store-dead02"));
  CHECK(absl::StartsWith(s.proxy->directory(), base + "/meshrun-store-"));
}

TEST_CASE("store proxy: 8 workers' unique-id exchange of a 3-D mesh is 1-2 server calls of their node",
          "[store_proxy]") {
  // libmesh's own exchange (agreement.cc). With the first member's verdict
  // (everyone_checks_up_to 0, as for a mesh of more than 64 members): every
  // worker sets its payload and description and waits for its rows'
  // leaders' payloads and the verdict, which rank 0 sets only after its own
  // wait returns. Sent one by one that is 9 server requests (8 + the
  // verdict); merged into one wait it would never end (rank 0's answer
  // would wait for the verdict). Batched, each worker is answered on its
  // own: the node's 8 publications in one call (held until all 8 came, as
  // the agent configures its proxy with --nproc_per_node), then the
  // verdict. With every member checking (8 <= 64, the default), only the
  // publications' call.
  const int checks = GENERATE(0, 64);
  INFO("everyone_checks_up_to " << checks);
  agent::StoreProxyOptions o;
  o.batch.expected_publishers = 8;
  o.batch.publication_hold = absl::Seconds(20);  // Ends when the 8th comes.
  Setup s(o);
  auto before = s.ServerStatus().store_requests_by_node();
  // Mesh (2, 2, 2) on one node: dimension d's rows are the ranks that
  // differ only in bit (2 - d).
  std::vector<std::thread> workers;
  std::vector<absl::StatusOr<std::vector<std::string>>> got(8, absl::UnknownError("not run"));
  for (int rank = 0; rank < 8; ++rank) {
    workers.emplace_back([&, rank] {
      auto store = s.Worker();
      std::vector<mesh::internal::GroupSpec> rows;
      for (int d = 0; d < 3; ++d) {
        const int bit = 1 << (2 - d);
        mesh::internal::GroupSpec row;
        row.key = absl::StrCat("mesh/m/d", d, "/row", rank & ~bit);
        row.name = row.key;
        row.dim_name = absl::StrCat("d", d);
        row.ranks = {rank & ~bit, rank | bit};
        row.group_rank = (rank & bit) != 0 ? 1 : 0;
        rows.push_back(row);
      }
      mesh::internal::Agreement agreement{{"cuda", "nccl", "2,2,2", "d0,d1,d2", rank, "world", 0, rank, ""},
                                          "mesh/m",
                                          {0, 1, 2, 3, 4, 5, 6, 7},
                                          [](int r) { return absl::StrCat("rank ", r); },
                                          checks};
      int n = 0;
      got[static_cast<size_t>(rank)] = mesh::internal::ExchangeUniqueIds(
          *store, rows, agreement, absl::Seconds(30),
          [&] { return absl::StatusOr<std::string>(absl::StrCat("id-", rank, "-", n++)); });
    });
  }
  for (auto& t : workers) t.join();
  for (int rank = 0; rank < 8; ++rank) {
    INFO("rank " << rank);
    REQUIRE(got[static_cast<size_t>(rank)].ok());
    for (int d = 0; d < 3; ++d) {
      const int leader = rank & ~(1 << (2 - d));
      // The leader's n-th id is for its n-th row it leads (rows before d).
      int call = 0;
      for (int j = 0; j < d; ++j) call += (leader & (1 << (2 - j))) == 0 ? 1 : 0;
      CHECK((*got[static_cast<size_t>(rank)])[static_cast<size_t>(d)] == absl::StrCat("id-", leader, "-", call));
    }
  }
  auto after = s.ServerStatus().store_requests_by_node();
  const int64_t calls = after["node-a"] - before["node-a"];
  CHECK(calls == (checks > 0 ? 1 : 2));  // The 8 publications, the verdict (2 per dimension would be 6).
  agent::StoreBatcherStats b = s.proxy->batch_stats();
  CHECK(b.items == 8);
  CHECK(b.batches == 1);
  CHECK(b.holds_ended_by_time == 0);
  WARN("server calls for 8 workers' exchange: " << calls << " (" << b.items << " requests in " << b.batches
                                                << " batches)");
}

TEST_CASE("store proxy: a read larger than gRPC's default 4 MiB message reaches the worker", "[store_proxy]") {
  // A large mesh's first member reads every member's description; 6 values
  // of 1 MiB (max_value_bytes) stand in for that here, through the cache
  // (write-once keys) and forwarded (mutable keys).
  Setup s;
  auto store = s.Worker();
  const std::string mib(1 << 20, 'x');
  std::vector<std::string> once, plain;
  for (int i = 0; i < 6; ++i) {
    once.push_back("mesh/big/" + std::to_string(i));
    plain.push_back("big/" + std::to_string(i));
    REQUIRE(store->Set(once.back(), mib).ok());
    REQUIRE(store->Set(plain.back(), mib).ok());
  }
  auto cached = s.Worker()->MultiGet(once, absl::Seconds(10));
  REQUIRE(cached.ok());
  CHECK(cached->size() == 6);
  CHECK((*cached)[5] == mib);
  auto forwarded = s.Worker()->MultiGet(plain, absl::Seconds(10));
  REQUIRE(forwarded.ok());
  CHECK(forwarded->size() == 6);
}
