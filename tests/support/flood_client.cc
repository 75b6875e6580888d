// A hostile client for the flood tests (tests/e2e/flood_test.cc): it makes
// a rendezvous server hold as much of one kind of object as it will take,
// keeps it held until SIGTERM (or --seconds), then cancels everything and
// exits. One kind per run (--mode):
//   keys     store keys with empty values, over --runs store-only runs
//            (KvMultiSet, 512 keys per call);
//   streams  Watch streams with made-up node ids over --runs runs;
//   waits    parked KvGet reads of a key nobody sets, in one run;
//   health   grpc.health.v1 Watch streams;
//   lockout  Watch streams with made-up node ids on one run (--run_id: the
//            victim job's id);
//   runs     KvSet to distinct run ids, again and again (store-only runs);
//   parked   Joins that wait (never answered on a stream): distinct node
//            ids into --runs runs whose round needs 2^20 nodes, held until
//            SIGTERM (or --seconds);
//   joins    one Join of a two-node round to each of --count distinct run
//            ids (--run_id-0, ...), each cancelled by its deadline after
//            --join_ms (default 1000) unless answered first; the client
//            exits once every join has ended ("flood: joins ended N
//            cancelled C refused R").
// Calls go over --connections channels. It prints "flood: held N refused M"
// once a second, and "flood: saturated" once --count objects are held or
// the server refuses (RESOURCE_EXHAUSTED) what it asks for. Exit 0 after a
// stop; 2 on bad flags.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "meshrun/proto/health.grpc.pb.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"

namespace {

namespace pb = ::meshrun::v1;
using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

struct Flags {
  std::string endpoint, mode, token, run_id = "flood";
  int64_t count = 100000;
  int connections = 8;
  int runs = 5;
  double seconds = 600;
  int64_t join_ms = 1000;
};

std::atomic<int64_t> g_held{0}, g_refused{0}, g_other{0};

// A Join of made-up node `node_id` to run `run_id`, whose round closes
// with `nodes` nodes (1 << 20: never).
pb::JoinRequest FloodJoin(const Flags& f, const std::string& run_id, const std::string& node_id, int nodes) {
  pb::JoinRequest req;
  req.mutable_run()->set_run_id(run_id);
  req.mutable_run()->set_token(f.token);
  req.mutable_node()->set_node_id(node_id);
  req.mutable_node()->set_hostname("flood");
  req.mutable_node()->set_addr("127.0.0.1");
  req.mutable_node()->set_pid(1);
  req.mutable_node()->set_nproc(1);
  req.mutable_node()->set_node_rank_hint(-1);
  req.mutable_node()->set_master_port(29500);
  req.mutable_config()->set_min_nodes(nodes);
  req.mutable_config()->set_max_nodes(nodes);
  req.set_last_round(-1);
  return req;
}

// One outstanding async call: a stream (Watch, health Watch) or a unary
// read (KvGet), each with its own context so that it can be cancelled.
struct Call {
  grpc::ClientContext ctx;
  grpc::Status status;
  pb::RunEvent event;
  HealthCheckResponse health;
  pb::KvGetResponse get;
  pb::JoinResponse join_resp;
  std::unique_ptr<grpc::ClientAsyncReader<pb::RunEvent>> watch;
  std::unique_ptr<grpc::ClientAsyncReader<HealthCheckResponse>> health_watch;
  std::unique_ptr<grpc::ClientAsyncResponseReader<pb::KvGetResponse>> kv_get;
  std::unique_ptr<grpc::ClientAsyncResponseReader<pb::JoinResponse>> join;
  bool started = false;
  bool finishing = false;
  bool done = false;
};

// Keeps up to f.count calls open; each completion queue event advances a
// call (start -> reads -> finish). A finished call is counted as refused
// when its status is RESOURCE_EXHAUSTED.
void AsyncFlood(const Flags& f, const std::vector<std::shared_ptr<grpc::Channel>>& channels) {
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Call>> calls;
  std::vector<std::unique_ptr<pb::Rendezvous::Stub>> stubs;
  std::vector<std::unique_ptr<pb::Store::Stub>> store_stubs;
  std::vector<std::unique_ptr<Health::Stub>> health_stubs;
  for (const auto& ch : channels) {
    stubs.push_back(pb::Rendezvous::NewStub(ch));
    store_stubs.push_back(pb::Store::NewStub(ch));
    health_stubs.push_back(Health::NewStub(ch));
  }
  int64_t open = 0;
  int64_t next = 0;
  bool saturated = false;
  const absl::Time end = absl::Now() + absl::Seconds(f.seconds);
  absl::Time last_print = absl::Now();
  auto start_one = [&] {
    auto c = std::make_unique<Call>();
    Call* call = c.get();
    const int64_t i = next++;
    const size_t ch = static_cast<size_t>(i) % channels.size();
    if (!f.token.empty() && f.mode == "health") call->ctx.AddMetadata("authorization", "Bearer " + f.token);
    if (f.mode == "streams" || f.mode == "lockout") {
      pb::WatchRequest req;
      req.mutable_run()->set_run_id(f.mode == "lockout" ? f.run_id : absl::StrCat(f.run_id, "-", i % f.runs));
      req.mutable_run()->set_token(f.token);
      req.set_node_id(absl::StrCat("made-up-node-", i));
      // Round 0 known: streams on the run, never a new job under its id (a
      // stream with -1 on an ended run starts one, as a re-run's agent may;
      // that race with a job's last agent is in the issue 23 notes).
      req.set_known_round(0);
      call->watch = stubs[ch]->AsyncWatch(&call->ctx, req, &cq, call);
    } else if (f.mode == "health") {
      HealthCheckRequest req;
      call->health_watch = health_stubs[ch]->AsyncWatch(&call->ctx, req, &cq, call);
    } else if (f.mode == "parked") {
      const pb::JoinRequest req =
          FloodJoin(f, absl::StrCat(f.run_id, "-", i % f.runs), absl::StrCat("parked-node-", i), 1 << 20);
      call->join = stubs[ch]->AsyncJoin(&call->ctx, req, &cq);
      call->join->Finish(&call->join_resp, &call->status, call);
      call->started = true;
      call->finishing = true;
    } else {  // waits
      pb::KvGetRequest req;
      req.mutable_run()->set_run_id(f.run_id);
      req.mutable_run()->set_token(f.token);
      req.set_key(absl::StrCat("never-set-", i));
      req.set_wait_ms(3600 * 1000);
      call->kv_get = store_stubs[ch]->AsyncKvGet(&call->ctx, req, &cq);
      call->kv_get->Finish(&call->get, &call->status, call);
      call->started = true;
      call->finishing = true;
    }
    calls.push_back(std::move(c));
    ++open;
  };
  // Bounded: at most f.count calls made in all, plus re-tries of refused
  // ones at a paced rate.
  while (!g_stop.load() && absl::Now() < end) {
    // Until saturated, as fast as it goes; then a paced 50 per tick (at
    // most 500 a second), replacing what the server ended or refused.
    for (int64_t n = 0; open < f.count && (!saturated || n < 50); ++n) start_one();
    void* tag = nullptr;
    bool ok = false;
    auto r = cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    if (r == grpc::CompletionQueue::TIMEOUT) {
      // Nothing moved: as much as the server holds.
    } else if (r == grpc::CompletionQueue::GOT_EVENT) {
      Call* call = static_cast<Call*>(tag);
      if (call->finishing) {
        call->done = true;
        --open;
        if (call->status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          g_refused.fetch_add(1);
          saturated = true;
        } else {
          g_other.fetch_add(1);
        }
      } else if (!call->started) {
        call->started = true;
        if (!ok) {
          call->finishing = true;
          if (call->watch) call->watch->Finish(&call->status, call);
          if (call->health_watch) call->health_watch->Finish(&call->status, call);
        } else {
          g_held.fetch_add(1);
          if (call->watch) call->watch->Read(&call->event, call);
          if (call->health_watch) call->health_watch->Read(&call->health, call);
        }
      } else if (ok) {
        if (call->watch) call->watch->Read(&call->event, call);
        if (call->health_watch) call->health_watch->Read(&call->health, call);
      } else {
        g_held.fetch_sub(1);
        call->finishing = true;
        if (call->watch) call->watch->Finish(&call->status, call);
        if (call->health_watch) call->health_watch->Finish(&call->status, call);
      }
    }
    if (open >= f.count) saturated = true;
    if (absl::Now() - last_print > absl::Seconds(1)) {
      last_print = absl::Now();
      std::printf("flood: held %lld refused %lld\n", static_cast<long long>(g_held.load()),
                  static_cast<long long>(g_refused.load()));
      if (saturated) std::printf("flood: saturated\n");
      std::fflush(stdout);
    }
    // Waits and parked joins (unary) count as held while parked: started
    // and not finished.
    if (f.mode == "waits" || f.mode == "parked") g_held.store(open);
  }
  for (auto& c : calls) {
    if (!c->done) c->ctx.TryCancel();
  }
  // Drain: every call's finish comes back (bounded in time).
  const absl::Time drain_end = absl::Now() + absl::Seconds(20);
  while (open > 0 && absl::Now() < drain_end) {
    void* tag = nullptr;
    bool ok = false;
    if (cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::milliseconds(100)) !=
        grpc::CompletionQueue::GOT_EVENT) {
      continue;
    }
    Call* call = static_cast<Call*>(tag);
    if (call->finishing) {
      call->done = true;
      --open;
    } else {
      call->started = true;
      call->finishing = true;
      if (call->watch) call->watch->Finish(&call->status, call);
      if (call->health_watch) call->health_watch->Finish(&call->status, call);
    }
  }
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
}

// keys and runs: synchronous writes from one thread per channel.
void WriteFlood(const Flags& f, const std::vector<std::shared_ptr<grpc::Channel>>& channels) {
  std::atomic<bool> saturated{false};
  std::vector<std::thread> threads;
  const absl::Time end = absl::Now() + absl::Seconds(f.seconds);
  for (size_t t = 0; t < channels.size(); ++t) {
    threads.emplace_back([&, t] {
      auto stub = pb::Store::NewStub(channels[t]);
      int64_t i = 0;
      while (!g_stop.load() && absl::Now() < end) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        grpc::Status s;
        if (f.mode == "keys") {
          if (g_held.load() >= f.count) {
            saturated = true;
            absl::SleepFor(absl::Milliseconds(50));
            continue;
          }
          pb::KvMultiSetRequest req;
          req.mutable_run()->set_run_id(absl::StrCat(f.run_id, "-", (t + i) % f.runs));
          req.mutable_run()->set_token(f.token);
          for (int k = 0; k < 512; ++k) {
            req.add_keys(absl::StrCat("k", t, ".", i, ".", k));
            req.add_values("");
          }
          pb::KvMultiSetResponse resp;
          s = stub->KvMultiSet(&ctx, req, &resp);
          if (s.ok()) g_held.fetch_add(512);
        } else {  // runs: a new run id each call up to --count, then again from the first
          pb::KvSetRequest req;
          req.mutable_run()->set_run_id(absl::StrCat(f.run_id, "-", t, "-", i % (f.count / channels.size() + 1)));
          req.mutable_run()->set_token(f.token);
          req.set_key("k");
          req.set_value("v");
          pb::KvSetResponse resp;
          s = stub->KvSet(&ctx, req, &resp);
          if (s.ok() && i < f.count / static_cast<int64_t>(channels.size()) + 1) g_held.fetch_add(1);
          if (i >= f.count / static_cast<int64_t>(channels.size()) + 1) saturated = true;
        }
        ++i;
        if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          g_refused.fetch_add(1);
          saturated = true;
          absl::SleepFor(absl::Milliseconds(20));  // Keep pressing, paced.
        } else if (!s.ok()) {
          g_other.fetch_add(1);
          absl::SleepFor(absl::Milliseconds(20));
        }
      }
    });
  }
  absl::Time last_print = absl::InfinitePast();
  while (!g_stop.load() && absl::Now() < end) {
    if (absl::Now() - last_print > absl::Seconds(1)) {
      last_print = absl::Now();
      std::printf("flood: held %lld refused %lld\n", static_cast<long long>(g_held.load()),
                  static_cast<long long>(g_refused.load()));
      if (saturated.load()) std::printf("flood: saturated\n");
      std::fflush(stdout);
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (auto& th : threads) th.join();
}

// joins: every join at once, asynchronously; each ends by its deadline (the
// client cancels it), or by the server's answer or refusal. Returns when
// every join has ended (bounded: the deadline plus 20 s).
void JoinFlood(const Flags& f, const std::vector<std::shared_ptr<grpc::Channel>>& channels) {
  struct JoinCall {
    grpc::ClientContext ctx;
    pb::JoinResponse resp;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<pb::JoinResponse>> reader;
  };
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<pb::Rendezvous::Stub>> stubs;
  for (const auto& ch : channels) stubs.push_back(pb::Rendezvous::NewStub(ch));
  std::vector<std::unique_ptr<JoinCall>> calls;
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(f.join_ms);
  for (int64_t i = 0; i < f.count; ++i) {
    auto c = std::make_unique<JoinCall>();
    c->ctx.set_deadline(deadline);
    // A two-node round: never closes with one node.
    const pb::JoinRequest req = FloodJoin(f, absl::StrCat(f.run_id, "-", i), absl::StrCat("flood-node-", i), 2);
    c->reader = stubs[static_cast<size_t>(i) % stubs.size()]->AsyncJoin(&c->ctx, req, &cq);
    c->reader->Finish(&c->resp, &c->status, c.get());
    calls.push_back(std::move(c));
  }
  int64_t ended = 0, cancelled = 0, refused = 0;
  const absl::Time end = absl::Now() + absl::Milliseconds(f.join_ms) + absl::Seconds(20);
  while (ended < f.count && absl::Now() < end) {
    void* tag = nullptr;
    bool ok = false;
    if (cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::milliseconds(100)) !=
        grpc::CompletionQueue::GOT_EVENT) {
      continue;
    }
    const grpc::StatusCode code = static_cast<JoinCall*>(tag)->status.error_code();
    ++ended;
    cancelled += code == grpc::StatusCode::DEADLINE_EXCEEDED || code == grpc::StatusCode::CANCELLED;
    refused += code == grpc::StatusCode::RESOURCE_EXHAUSTED;
  }
  std::printf("flood: joins ended %lld cancelled %lld refused %lld\n", static_cast<long long>(ended),
              static_cast<long long>(cancelled), static_cast<long long>(refused));
  std::fflush(stdout);
  for (auto& c : calls) c->ctx.TryCancel();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  g_held.store(cancelled);
  g_refused.store(refused);
  g_other.store(ended - cancelled - refused);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = absl::StrCat("--", name, "=");
      return a.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("endpoint")) f.endpoint = v;
    else if (const char* v = value("mode")) f.mode = v;
    else if (const char* v = value("token")) f.token = v;
    else if (const char* v = value("run_id")) f.run_id = v;
    else if (const char* v = value("count")) f.count = std::atoll(v);
    else if (const char* v = value("connections")) f.connections = std::atoi(v);
    else if (const char* v = value("runs")) f.runs = std::atoi(v);
    else if (const char* v = value("seconds")) f.seconds = std::atof(v);
    else if (const char* v = value("join_ms")) f.join_ms = std::atoll(v);
    else {
      std::fprintf(stderr, "flood_client: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  const std::string modes = " keys streams waits health lockout runs joins parked ";
  if (f.endpoint.empty() || modes.find(" " + f.mode + " ") == std::string::npos || f.count <= 0 ||
      f.connections <= 0 || f.runs <= 0) {
    std::fprintf(stderr, "flood_client: need --endpoint=HOST:PORT and --mode=one of%s(count, connections, runs > 0)\n",
                 modes.c_str());
    return 2;
  }
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < f.connections; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("flood.channel", i);  // Distinct arguments: a connection each.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels.push_back(grpc::CreateCustomChannel(f.endpoint, grpc::InsecureChannelCredentials(), args));
  }
  if (f.mode == "joins") {
    JoinFlood(f, channels);
  } else if (f.mode == "keys" || f.mode == "runs") {
    WriteFlood(f, channels);
  } else {
    AsyncFlood(f, channels);
  }
  std::printf("flood: stopped; held %lld refused %lld other %lld\n", static_cast<long long>(g_held.load()),
              static_cast<long long>(g_refused.load()), static_cast<long long>(g_other.load()));
  return 0;
}
