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

using namespace meshrun;
using namespace meshrun::client;

namespace {

// A loopback port nobody listens on (bound, then closed), as a server gone away.
int DeadPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  close(fd);
  return static_cast<int>(ntohs(a.sin_port));
}

struct Setup {
  std::unique_ptr<rendezvous::RendezvousServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<agent::StoreProxy> proxy;

  explicit Setup(agent::StoreProxyOptions o = {}) {
    rendezvous::ServerOptions so;
    so.host = "127.0.0.1";
    so.token = "s3cret";
    auto s = rendezvous::RendezvousServer::Start(so);
    REQUIRE(s.ok());
    server = std::move(*s);
    // As the agent's channel (client/rdzv_client.cc): it carries the proxy's reads.
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxStoreAnswerBytes);
    channel = grpc::CreateCustomChannel(server->endpoint(), grpc::InsecureChannelCredentials(), args);
    if (o.run_id.empty()) o.run_id = "job";
    o.token = "s3cret";
    auto p = agent::StoreProxy::Start(o, channel, "node-a");
    REQUIRE(p.ok());
    proxy = std::move(*p);
    proxy->SetRound(0);
  }

  std::shared_ptr<Store> Worker(const std::string& run = "job", int64_t round = 0) const {
    GrpcStoreOptions o;
    o.endpoint = proxy->endpoint();
    o.run_id = run;
    o.round = round;
    o.connect_timeout = absl::Seconds(5);
    auto s = ConnectGrpcStore(o);
    REQUIRE(s.ok());
    return *s;
  }

  // The server's Status: of every run, or of run `run_id` only.
  v1::StatusResponse ServerStatus(const std::string& run_id = "") const {
    auto stub = v1::Admin::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::StatusRequest req;
    req.mutable_run()->set_token("s3cret");
    req.mutable_run()->set_run_id(run_id);
    v1::StatusResponse resp;
    REQUIRE(stub->Status(&ctx, req, &resp).ok());
    return resp;
  }
};

}  // namespace

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
  GrpcStoreOptions direct;
  direct.endpoint = s.server->endpoint();
  direct.run_id = "job";
  direct.token = "s3cret";
  auto server_side = ConnectGrpcStore(direct);
  REQUIRE(server_side.ok());
  CHECK(*(*server_side)->Get("mesh/k", absl::ZeroDuration()) == "job");
  absl::Status refused = s.Worker("job-group-2")->Set("k", "v");
  CHECK(absl::IsPermissionDenied(refused));
  CHECK(absl::StrContains(refused.message(), "serves run 'job-group-1' and its lighthouse's run 'job' only"));
}

TEST_CASE("store proxy: a write that met a server gone away is sent again to the next leader", "[store_proxy]") {
  Setup s;
  // The agent's channel now names a server that is gone (a port nobody listens on), as after
  // a leader's death, and the proxy follows the leader (replicas).
  const int dead_port = DeadPort();
  s.proxy->SetFollowLeader(true);
  s.proxy->SetUpstream(grpc::CreateChannel(absl::StrCat("127.0.0.1:", dead_port), grpc::InsecureChannelCredentials()),
                       "node-a");
  auto store = s.Worker();
  // An ADD is not sent twice (it might have been applied): its error comes at once.
  CHECK(absl::IsUnavailable(store->Add("counter", 1).status()));
  absl::Status set = absl::UnknownError("not answered");
  std::atomic<bool> answered{false};
  std::thread writer([&] {
    set = store->Set("k", "v");
    answered = true;
  });
  // The write is kept, not failed: for half a second (a bounded window for a negative) it has
  // no answer; once the agent names the next leader it goes there.
  absl::SleepFor(absl::Milliseconds(500));
  CHECK_FALSE(answered.load());
  s.proxy->SetUpstream(s.channel, "node-a");
  writer.join();
  CHECK(set.ok());
  GrpcStoreOptions direct;
  direct.endpoint = s.server->endpoint();
  direct.run_id = "job";
  direct.token = "s3cret";
  auto server_side = ConnectGrpcStore(direct);
  REQUIRE(server_side.ok());
  CHECK(*(*server_side)->Get("k", absl::ZeroDuration()) == "v");
}

TEST_CASE("store proxy: requests kept on the leader the agent follows are sent there again when no next one comes",
          "[store_proxy]") {
  // The leader the agent already follows answers UNAVAILABLE (here: nothing listens on its
  // port yet, as a replica elected but not serving) and no other leader will be named: the
  // kept requests must go to it again once it serves, not wait for a leader change that
  // never comes (they did: each waited out its worker's deadline).
  agent::StoreProxyOptions po;
  po.kept_retry = absl::Milliseconds(200);
  Setup s(po);
  const int port = DeadPort();
  grpc::ChannelArguments fast;
  fast.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  fast.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  fast.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  s.proxy->SetFollowLeader(true);
  s.proxy->SetUpstream(
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), fast), "node-a");
  auto store = s.Worker();
  // A forwarded write and a batched read (a write-once key, waited for).
  std::promise<absl::Status> set;
  std::promise<absl::StatusOr<std::string>> got;
  std::thread writer([&] { set.set_value(store->Set("k", "v")); });
  std::thread reader([&] { got.set_value(store->Get("mesh/kept/id", absl::Seconds(20))); });
  absl::SleepFor(absl::Milliseconds(300));  // Both are kept by now (and sent again at least once).
  // The same address starts to serve; the proxy is told nothing.
  rendezvous::ServerOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  so.token = "s3cret";
  auto later = rendezvous::RendezvousServer::Start(so);
  REQUIRE(later.ok());
  const absl::Time served = absl::Now();
  GrpcStoreOptions direct;
  direct.endpoint = (*later)->endpoint();
  direct.run_id = "job";
  direct.token = "s3cret";
  auto server_side = ConnectGrpcStore(direct);
  REQUIRE(server_side.ok());
  REQUIRE((*server_side)->Set("mesh/kept/id", "unique").ok());
  auto set_done = set.get_future();
  auto got_done = got.get_future();
  // Bounded waits: the worker's own deadlines are 10 s (the write) and 30 s (the read).
  REQUIRE(set_done.wait_for(std::chrono::seconds(8)) == std::future_status::ready);
  REQUIRE(got_done.wait_for(std::chrono::seconds(8)) == std::future_status::ready);
  const absl::Duration took = absl::Now() - served;
  writer.join();
  reader.join();
  const absl::Status w = set_done.get();
  const absl::StatusOr<std::string> r = got_done.get();
  INFO("write: " << w << "; read: " << r.status() << "; answered " << absl::FormatDuration(took) << " after the leader served");
  CHECK(w.ok());
  REQUIRE(r.ok());
  CHECK(*r == "unique");
  CHECK(took < absl::Seconds(5));
  CHECK(*(*server_side)->Get("k", absl::ZeroDuration()) == "v");
}

TEST_CASE("store proxy: a store over its in-process channel reports a first wait's timeout as a timeout",
          "[store_proxy]") {
  // The agent's own store client (its TCPStore-protocol store) reaches the proxy in-process.
  // Its first call may be a wait that times out: that is DEADLINE_EXCEEDED, not "unreachable"
  // (it was: an in-process channel has no connection state to look at, and the agent store
  // closed its client's connection on it).
  Setup s;
  GrpcStoreOptions o;
  o.endpoint = s.proxy->endpoint();
  o.run_id = "job";
  o.wait_for_connection = false;
  o.channel = s.proxy->InProcessChannel();
  auto store = ConnectGrpcStore(o);
  REQUIRE(store.ok());
  const absl::Status w = (*store)->Wait({"never"}, absl::Milliseconds(200));
  INFO(w);
  CHECK(absl::IsDeadlineExceeded(w));
  REQUIRE((*store)->Set("k", "v").ok());
  CHECK(*(*store)->Get("k", absl::ZeroDuration()) == "v");
}

TEST_CASE("store proxy: a write kept for the next leader ends with its worker's deadline, and the proxy stops without one",
          "[store_proxy]") {
  Setup s;
  s.proxy->SetFollowLeader(true);
  s.proxy->SetUpstream(grpc::CreateChannel(absl::StrCat("127.0.0.1:", DeadPort()), grpc::InsecureChannelCredentials()),
                       "node-a");
  GrpcStoreOptions o;
  o.endpoint = s.proxy->endpoint();
  o.run_id = "job";
  o.connect_timeout = absl::Seconds(5);
  o.rpc_slack = absl::Seconds(1);  // The worker's deadline: 1 s for a set.
  auto store = ConnectGrpcStore(o);
  REQUIRE(store.ok());
  // Kept (the server went away, no next leader is named), then ended by the worker's deadline.
  absl::Status set = (*store)->Set("k", "v");
  CHECK(absl::IsDeadlineExceeded(set));
  // No leader is ever named: the proxy still stops, within its own bounds (100 ms for its
  // server's calls, 5 s for its server requests). Before, the kept call was never answered
  // and the proxy's gRPC server waited for it forever (an agent that never exits).
  std::promise<void> stopped;
  std::thread stopper([&] {
    s.proxy.reset();
    stopped.set_value();
  });
  if (stopped.get_future().wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    std::fprintf(stderr, "FAIL: the store proxy did not stop within 20 s with a kept call whose worker had gone\n");
    std::_Exit(1);  // The stopper thread is stuck on the proxy: nothing else can end this process.
  }
  stopper.join();
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
