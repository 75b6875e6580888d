#include "bench/rdzv_scale/kvset_latency.h"

#include <algorithm>
#include <vector>

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

}  // namespace meshrun::bench
