// Sets or reads one key of a run's store, for the shell tests of replicated
// servers (tests/etcd/failover_test.sh):
//   store_keys set KEY VALUE | get KEY            as a worker: the store from the
//                                                 environment (the agent's proxy)
//   store_keys setget KEY VALUE KEY2              as a worker: set KEY, then wait
//                                                 for KEY2 (parked once KEY is set)
//   store_keys @ENDPOINT RUN_ID ROUND set KEY VALUE | get KEY   straight to a server
//   store_keys ... bench N                          N sets of distinct keys, one at a
//                                                 time: prints "kvset p50=.. p99=.. us"
//   store_keys ... getbench KEY SECONDS              reads of KEY (no wait), one at a
//                                                 time for SECONDS: prints "kvget n=..
//                                                 ok=.. p50=.. p99=.. max=.. us" over
//                                                 every answer, refusals included
//   store_keys ... addloop KEY STOPFILE MAX        adds 1 to KEY, one at a time, until
//                                                 STOPFILE exists or MAX adds: every
//                                                 answer must be the one before plus 1,
//                                                 from 1; prints "addloop ok n=N last=V",
//                                                 or "addloop failed ..." (exit 1)
//   store_keys @ENDPOINT RUN_ID ROUND addid KEY REQUEST_ID
//                                                 adds 1 to KEY as request REQUEST_ID
//                                                 (KvAdd's request_id; no token, no
//                                                 TLS) and prints the answer
// `get` waits up to 10 s for the key and prints its value. Exit 0 when the call
// worked, 1 when it failed (the status printed), 2 on bad arguments.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include "absl/strings/numbers.h"
#include "client/grpc_store.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"

int main(int argc, char** argv) {
  meshrun::client::GrpcStoreOptions options;
  int i = 1;
  if (argc > 1 && argv[1][0] == '@') {
    if (argc < 4) return 2;
    options.endpoint = argv[1] + 1;
    options.run_id = argv[2];
    if (!absl::SimpleAtoi(argv[3], &options.round)) return 2;
    i = 4;
  } else {
    auto env = meshrun::client::GrpcStoreOptionsFromEnv();
    if (!env.ok()) {
      std::printf("options: %s\n", env.status().ToString().c_str());
      return 2;
    }
    options = *env;
  }
  if (argc - i < 2) return 2;
  const std::string op = argv[i], key = argv[i + 1];
  if (op == "addid" && argc - i == 3) {
    if (argv[1][0] != '@') return 2;
    auto stub = meshrun::v1::Store::NewStub(grpc::CreateChannel(options.endpoint, grpc::InsecureChannelCredentials()));
    meshrun::v1::KvAddRequest req;
    req.mutable_run()->set_run_id(options.run_id);
    req.set_round(options.round);
    req.set_key(key);
    req.set_delta(1);
    req.set_request_id(argv[i + 2]);
    meshrun::v1::KvAddResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status s = stub->KvAdd(&ctx, req, &resp);
    if (!s.ok()) {
      std::printf("addid: %d %s\n", static_cast<int>(s.error_code()), s.error_message().c_str());
      return 1;
    }
    std::printf("%lld\n", static_cast<long long>(resp.value()));
    return 0;
  }
  options.connect_timeout = absl::Seconds(5);
  auto store = meshrun::client::ConnectGrpcStore(options);
  if (!store.ok()) {
    std::printf("connect: %s\n", store.status().ToString().c_str());
    return 1;
  }
  if (op == "set" && argc - i == 3) {
    absl::Status s = (*store)->Set(key, argv[i + 2]);
    if (!s.ok()) std::printf("set: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  if (op == "bench") {
    int n = 0;
    if (!absl::SimpleAtoi(key, &n) || n < 1 || n > 1000000) return 2;
    std::vector<double> us;
    for (int k = 0; k < n; ++k) {
      const absl::Time t0 = absl::Now();
      absl::Status s = (*store)->Set(absl::StrCat("bench/", k), "value-of-32-bytes-0123456789abcd");
      us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
      if (!s.ok()) {
        std::printf("set: %s\n", s.ToString().c_str());
        return 1;
      }
    }
    std::sort(us.begin(), us.end());
    std::printf("kvset n=%d p50=%.0f p99=%.0f us\n", n, us[us.size() / 2], us[us.size() * 99 / 100]);
    return 0;
  }
  if (op == "getbench" && argc - i == 3) {
    double seconds = 0;
    if (!absl::SimpleAtod(argv[i + 2], &seconds) || seconds <= 0 || seconds > 3600) return 2;
    std::vector<double> us;
    int64_t ok = 0;
    const absl::Time end = absl::Now() + absl::Seconds(seconds);
    while (absl::Now() < end) {
      const absl::Time t0 = absl::Now();
      auto v = (*store)->Get(key, absl::ZeroDuration());
      us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
      if (v.ok()) ++ok;
      absl::SleepFor(absl::Milliseconds(1));
    }
    std::sort(us.begin(), us.end());
    std::printf("kvget n=%zu ok=%lld p50=%.0f p99=%.0f max=%.0f us\n", us.size(), static_cast<long long>(ok),
                us[us.size() / 2], us[us.size() * 99 / 100], us.back());
    return 0;
  }
  if (op == "addloop" && argc - i == 4) {
    int64_t max = 0;
    if (!absl::SimpleAtoi(argv[i + 3], &max) || max < 1) return 2;
    int64_t n = 0, last = 0;
    struct stat st;
    while (n < max && ::stat(argv[i + 2], &st) != 0) {
      absl::StatusOr<int64_t> v = (*store)->Add(key, 1);
      if (!v.ok()) {
        std::printf("addloop failed after %lld adds: %s\n", static_cast<long long>(n), v.status().ToString().c_str());
        return 1;
      }
      if (*v != last + 1) {
        std::printf("addloop failed: add %lld answered %lld after %lld\n", static_cast<long long>(n + 1),
                    static_cast<long long>(*v), static_cast<long long>(last));
        return 1;
      }
      last = *v;
      ++n;
    }
    std::printf("addloop ok n=%lld last=%lld\n", static_cast<long long>(n), static_cast<long long>(last));
    return 0;
  }
  if (op == "setget" && argc - i == 4) {
    // Sets KEY to VALUE, then waits for KEY2: once KEY is on the server,
    // the read of KEY2 has been sent right after (a test's sign that it is
    // parked there).
    if (absl::Status s = (*store)->Set(key, argv[i + 2]); !s.ok()) {
      std::printf("set: %s\n", s.ToString().c_str());
      return 1;
    }
    auto v = (*store)->Get(argv[i + 3], absl::Seconds(10));
    if (!v.ok()) {
      std::printf("get: %s\n", v.status().ToString().c_str());
      return 1;
    }
    std::printf("%s\n", v->c_str());
    return 0;
  }
  if (op == "get") {
    auto v = (*store)->Get(key, absl::Seconds(10));
    if (!v.ok()) {
      std::printf("get: %s\n", v.status().ToString().c_str());
      return 1;
    }
    std::printf("%s\n", v->c_str());
    return 0;
  }
  return 2;
}
