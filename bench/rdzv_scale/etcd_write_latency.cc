#include "bench/rdzv_scale/etcd_write_latency.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "rendezvous/state/etcd/client/etcd_client.h"
#include "rendezvous/state/etcd/client/etcd_url.h"
#include "rendezvous/state/etcd/election.h"

namespace meshrun::bench {
namespace {

namespace etcd = ::meshrun::rendezvous::state::etcd;

// Times `count` calls of `write(k)` after one untimed call: (p50, p99) in ms.
absl::StatusOr<std::pair<double, double>> Time(int count, const std::function<absl::Status(int)>& write) {
  if (absl::Status s = write(-1); !s.ok()) return s;
  std::vector<double> ms;
  ms.reserve(static_cast<size_t>(count));
  for (int k = 0; k < count; ++k) {
    const absl::Time t0 = absl::Now();
    absl::Status s = write(k);
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("write ", k + 1, " of ", count, ": ", s.message()));
  }
  std::sort(ms.begin(), ms.end());
  return std::make_pair(ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 99 / 100)]);
}

}  // namespace

absl::StatusOr<EtcdWriteLatency> MeasureEtcdWrites(const std::string& etcd_url, const std::string& prefix, int count) {
  if (count < 1) return absl::InvalidArgumentError(absl::StrCat("etcd write count ", count, ": must be at least 1"));
  absl::StatusOr<etcd::Url> url = etcd::ParseUrl(etcd_url);
  if (!url.ok()) return url.status();
  etcd::ClientOptions co;
  co.members = url->members;
  absl::StatusOr<std::unique_ptr<etcd::Client>> client = etcd::Client::Create(co);
  if (!client.ok()) return client.status();
  if (absl::Status s = (*client)->Connect(); !s.ok()) return s;
  const std::string value = "value-of-32-bytes-0123456789abcd";
  const std::string keys = prefix + "/keys/";
  EtcdWriteLatency out;
  out.count = count;
  absl::StatusOr<std::pair<double, double>> put = Time(count, [&](int k) {
    return (*client)->Put(absl::StrCat(keys, "put-", k), value).status();
  });
  if (!put.ok()) return put.status();
  std::tie(out.put_p50_ms, out.put_p99_ms) = *put;

  etcd::ElectionOptions eo;
  eo.prefix = prefix + "/election/";
  eo.marker_key = prefix + "/fence";
  etcd::Election election(client->get(), eo);
  absl::Notification elected;
  etcd::ElectionCallbacks cb;
  cb.on_elected = [&](const etcd::LeaderInfo&) { elected.Notify(); };
  if (absl::Status s = election.Campaign("bench", "bench", cb); !s.ok()) return s;
  if (!elected.WaitForNotificationWithTimeout(absl::Seconds(10))) {
    return absl::DeadlineExceededError("the bench's own election: not elected within 10 s");
  }
  absl::StatusOr<std::pair<double, double>> fenced = Time(count, [&](int k) {
    etcd::Txn txn;
    txn.success.push_back(etcd::Op::Put(absl::StrCat(keys, "fenced-", k), value));
    return election.FencedTxn(txn).status();
  });
  (void)election.Resign();
  (void)(*client)->DeletePrefix(prefix + "/");
  if (!fenced.ok()) return fenced.status();
  std::tie(out.fenced_p50_ms, out.fenced_p99_ms) = *fenced;
  return out;
}

}  // namespace meshrun::bench
