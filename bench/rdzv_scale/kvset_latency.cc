#include "bench/rdzv_scale/kvset_latency.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/grpc_store.h"

namespace meshrun::bench {

absl::StatusOr<KvSetLatency> MeasureKvSet(const std::string& endpoint, const std::string& run_id, int count) {
  if (count < 1) return absl::InvalidArgumentError(absl::StrCat("KvSet count ", count, ": must be at least 1"));
  client::GrpcStoreOptions options;
  options.endpoint = endpoint;
  options.run_id = run_id;
  options.connect_timeout = absl::Seconds(10);
  auto store = client::ConnectGrpcStore(options);
  if (!store.ok()) return store.status();
  const std::string value = "value-of-32-bytes-0123456789abcd";
  if (absl::Status s = (*store)->Set("kvset/warm-up", value); !s.ok()) return s;
  std::vector<double> ms;
  ms.reserve(static_cast<size_t>(count));
  for (int k = 0; k < count; ++k) {
    const absl::Time t0 = absl::Now();
    absl::Status s = (*store)->Set(absl::StrCat("kvset/", k), value);
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("KvSet ", k + 1, " of ", count, ": ", s.message()));
  }
  std::sort(ms.begin(), ms.end());
  KvSetLatency out;
  out.count = count;
  out.p50_ms = ms[ms.size() / 2];
  out.p99_ms = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  return out;
}

absl::StatusOr<ConcurrentKvSets> MeasureConcurrentKvSets(const std::string& endpoint, const std::string& run_id,
                                                         int count, int connections) {
  namespace pb = ::meshrun::v1;
  if (count < 1 || connections < 1) {
    return absl::InvalidArgumentError(absl::StrCat("concurrent KvSets ", count, " over ", connections,
                                                   " connections: both must be at least 1"));
  }
  const std::string value = "value-of-32-bytes-0123456789abcd";
  std::vector<std::unique_ptr<pb::Store::Stub>> stubs;
  for (int c = 0; c < connections; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // A connection of its own, as a node's.
    auto stub = pb::Store::NewStub(grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), args));
    pb::KvSetRequest req;
    req.mutable_run()->set_run_id(run_id);
    req.set_key(absl::StrCat("concurrent/warm-up-", c));
    req.set_value(value);
    pb::KvSetResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (grpc::Status s = stub->KvSet(&ctx, req, &resp); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("concurrent KvSets: warm-up of connection ", c, ": ",
                                                 s.error_message()));
    }
    stubs.push_back(std::move(stub));
  }
  struct Call {
    grpc::ClientContext ctx;
    pb::KvSetRequest req;
    pb::KvSetResponse resp;
    absl::Time sent;
    double ms = 0;
    grpc::Status status;
  };
  std::vector<Call> calls(static_cast<size_t>(count));
  absl::Mutex mu;
  int left = count;
  absl::Time last;
  for (int i = 0; i < count; ++i) {
    Call& c = calls[static_cast<size_t>(i)];
    c.req.mutable_run()->set_run_id(run_id);
    c.req.set_key(absl::StrCat("concurrent/", i));
    c.req.set_value(value);
    c.ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  }
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < count; ++i) {
    Call& c = calls[static_cast<size_t>(i)];
    c.sent = absl::Now();
    stubs[static_cast<size_t>(i % connections)]->async()->KvSet(&c.ctx, &c.req, &c.resp, [&c, &mu, &left, &last](grpc::Status s) {
      const absl::Time now = absl::Now();
      c.ms = absl::ToDoubleMilliseconds(now - c.sent);
      c.status = std::move(s);
      absl::MutexLock lock(&mu);
      last = std::max(last, now);
      --left;
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto done = [&left]() { return left == 0; };
    if (!mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(70))) {
      return absl::DeadlineExceededError(absl::StrCat("concurrent KvSets: ", left, " of ", count,
                                                      " unanswered after 70 s"));
    }
  }
  std::vector<double> ms;
  for (int i = 0; i < count; ++i) {
    const Call& c = calls[static_cast<size_t>(i)];
    if (!c.status.ok()) {
      return absl::UnavailableError(absl::StrCat("concurrent KvSet ", i, " of ", count, ": ", c.status.error_message()));
    }
    ms.push_back(c.ms);
  }
  std::sort(ms.begin(), ms.end());
  ConcurrentKvSets out;
  out.count = count;
  out.all_ms = absl::ToDoubleMilliseconds(last - t0);
  out.p50_ms = ms[ms.size() / 2];
  out.max_ms = ms.back();
  return out;
}

}  // namespace meshrun::bench
