// A candidate of the etcd election (rendezvous/state/etcd/election.h) in a
// process of its own, so that tests can kill -9 it:
//   etcd_candidate --endpoints H:P,H:P,... --prefix PREFIX --id ID [--ttl S] [--max_seconds N]
// Prints, one line each, flushed at once (times are CLOCK_MONOTONIC in ns,
// comparable across the processes of one machine):
//   CAMPAIGNING <id>
//   ELECTED <id> <ns>
//   DEPOSED <id> <ns> <why>
// Exits 0 after max_seconds (default 60) or 3 once deposed; 2 on bad
// arguments or a failed Campaign (its error on stderr).
#include <time.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "rendezvous/state/etcd/client/etcd_url.h"
#include "rendezvous/state/etcd/election.h"

namespace etcd = meshrun::rendezvous::state::etcd;

namespace {
long long MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}
}  // namespace

int main(int argc, char** argv) {
  std::string endpoints, prefix, id;
  int64_t ttl = 1;
  int max_seconds = 60;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string v = argv[i + 1];
    if (flag == "--endpoints") {
      endpoints = v;
    } else if (flag == "--prefix") {
      prefix = v;
    } else if (flag == "--id") {
      id = v;
    } else if (flag == "--ttl") {
      if (!absl::SimpleAtoi(v, &ttl)) return 2;
    } else if (flag == "--max_seconds") {
      if (!absl::SimpleAtoi(v, &max_seconds)) return 2;
    } else {
      std::fprintf(stderr, "etcd_candidate: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  absl::StatusOr<etcd::Url> url = etcd::ParseUrl("etcd://" + endpoints);
  if (!url.ok() || prefix.empty() || id.empty()) {
    std::fprintf(stderr, "etcd_candidate: --endpoints, --prefix and --id are required (%s)\n",
                 url.ok() ? "" : std::string(url.status().message()).c_str());
    return 2;
  }
  etcd::ClientOptions o;
  o.members = url->members;
  o.dial_timeout = absl::Milliseconds(500);
  absl::StatusOr<std::unique_ptr<etcd::Client>> client = etcd::Client::Create(o);
  if (!client.ok()) return 2;
  etcd::ElectionOptions eo;
  eo.prefix = prefix;
  eo.lease_ttl_s = ttl;
  etcd::Election election(client->get(), eo);
  absl::Mutex mu;
  bool deposed = false;
  etcd::ElectionCallbacks cb;
  cb.on_elected = [&](const etcd::LeaderInfo& self) {
    std::printf("ELECTED %s %lld\n", self.candidate_id.c_str(), MonotonicNs());
    std::fflush(stdout);
  };
  cb.on_deposed = [&](const absl::Status& why) {
    std::printf("DEPOSED %s %lld %s\n", id.c_str(), MonotonicNs(), std::string(why.message()).c_str());
    std::fflush(stdout);
    absl::MutexLock lock(&mu);
    deposed = true;
  };
  std::printf("CAMPAIGNING %s\n", id.c_str());
  std::fflush(stdout);
  absl::Status s = election.Campaign(id, "value-of-" + id, cb);
  if (!s.ok()) {
    std::fprintf(stderr, "etcd_candidate: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::MutexLock lock(&mu);
  mu.AwaitWithTimeout(absl::Condition(&deposed), absl::Seconds(max_seconds));
  return deposed ? 3 : 0;
}
