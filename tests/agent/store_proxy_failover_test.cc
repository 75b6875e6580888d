// The store proxy (agent/store_proxy/store_proxy.h) while the agent follows a
// replicated server's leader: requests that met a server gone away are kept
// and sent again (to the next leader, or to the one followed when none is
// named), end with their worker's deadline, and the proxy still stops; the
// agent's own client over the in-process channel.
#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/agent/store_proxy_fixture.h"
#include "tests/support/dead_port.h"

using namespace meshrun;
using namespace meshrun::client;
using meshrun::testing::store_proxy::ServerStore;
using meshrun::testing::store_proxy::Setup;

TEST_CASE("store proxy: writes that met a server gone away (a set, an add, a compare-set) are sent again to the next leader",
          "[store_proxy]") {
  Setup s;
  // The agent's channel now names a server that is gone (a port nobody listens on), as after
  // a leader's death, and the proxy follows the leader (replicas).
  const int dead_port = testing::DeadPort();
  s.proxy->SetFollowLeader(true);
  s.proxy->SetUpstream(grpc::CreateChannel(absl::StrCat("127.0.0.1:", dead_port), grpc::InsecureChannelCredentials()),
                       "node-a");
  auto store = s.Worker();
  // A set, an add and a compare-set (the last two sent with the proxy's request ids, so
  // that one sent twice takes effect once: rendezvous/store/request_records.h).
  absl::Status set = absl::UnknownError("not answered");
  absl::StatusOr<int64_t> add = absl::UnknownError("not answered");
  absl::StatusOr<std::string> cas = absl::UnknownError("not answered");
  std::atomic<int> answered{0};
  std::thread writer([&] {
    set = store->Set("k", "v");
    ++answered;
  });
  std::thread adder([&] {
    add = store->Add("counter", 1);
    ++answered;
  });
  std::thread swapper([&] {
    cas = store->CompareSet("owner", "", "rank0");
    ++answered;
  });
  // The writes are kept, not failed: for half a second (a bounded window for a negative) none
  // has an answer; once the agent names the next leader they go there.
  absl::SleepFor(absl::Milliseconds(500));
  CHECK(answered.load() == 0);
  s.proxy->SetUpstream(s.channel, "node-a");
  writer.join();
  adder.join();
  swapper.join();
  CHECK(set.ok());
  REQUIRE(add.ok());
  CHECK(*add == 1);
  REQUIRE(cas.ok());
  CHECK(*cas == "rank0");
  auto server = ServerStore(s.server->endpoint());
  CHECK(*server->Get("k", absl::ZeroDuration()) == "v");
  CHECK(*server->Get("counter", absl::ZeroDuration()) == "1");
  CHECK(*server->Get("owner", absl::ZeroDuration()) == "rank0");
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
  const int port = testing::DeadPort();
  REQUIRE(port > 0);
  grpc::ChannelArguments fast = testing::FastReconnect();
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
  auto server_side = ServerStore((*later)->endpoint());
  REQUIRE(server_side->Set("mesh/kept/id", "unique").ok());
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
  CHECK(*server_side->Get("k", absl::ZeroDuration()) == "v");
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
  s.proxy->SetUpstream(grpc::CreateChannel(absl::StrCat("127.0.0.1:", testing::DeadPort()), grpc::InsecureChannelCredentials()),
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

TEST_CASE("store proxy: writes kept for the next leader count against store_proxy_max_waiters", "[store_proxy]") {
  agent::StoreProxyOptions o;
  o.cache.max_waiters = 2;
  o.kept_retry = absl::Hours(1);  // Kept until the next leader is named: no resend in between.
  Setup s(o);
  s.proxy->SetFollowLeader(true);
  s.proxy->SetUpstream(grpc::CreateChannel(absl::StrCat("127.0.0.1:", testing::DeadPort()), grpc::InsecureChannelCredentials()),
                       "node-a");
  auto store = s.Worker();
  absl::Status sets[2] = {absl::UnknownError("not answered"), absl::UnknownError("not answered")};
  std::thread writers[2];
  for (int i = 0; i < 2; ++i) writers[i] = std::thread([&, i] { sets[i] = store->Set(absl::StrCat("k", i), "v"); });
  struct Joined {  // Also when a REQUIRE below ends the test: the next leader named, the writers joined.
    Setup& s;
    std::thread* writers;
    ~Joined() {
      s.proxy->SetUpstream(s.channel, "node-a");
      for (int i = 0; i < 2; ++i) {
        if (writers[i].joinable()) writers[i].join();
      }
    }
  } joined{s, writers};
  // Both are kept: each still holds its worker's call, so both count.
  for (int i = 0; i < 1000 && s.proxy->upstream_calls() < 2; ++i) absl::SleepFor(absl::Milliseconds(10));
  REQUIRE(s.proxy->upstream_calls() == 2);
  // A third is refused at once, naming the bound (before, kept calls were not counted and
  // a failover's worth of them could pile up past it).
  absl::Status third = store->Set("k2", "v");
  CHECK(absl::IsResourceExhausted(third));
  CHECK(third.message().find("store_proxy_max_waiters=2") != absl::string_view::npos);
  s.proxy->SetUpstream(s.channel, "node-a");
  for (std::thread& w : writers) w.join();
  CHECK(sets[0].ok());
  CHECK(sets[1].ok());
  // Each call stops counting just after its worker has its answer.
  for (int i = 0; i < 1000 && s.proxy->upstream_calls() > 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  CHECK(s.proxy->upstream_calls() == 0);
}
