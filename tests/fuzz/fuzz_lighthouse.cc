// Fuzz target: torchft's lighthouse (rendezvous/lighthouse/), its rule and
// its waiting calls, against properties that must hold whatever the calls:
//   - every answered call's quorum includes its group;
//   - a quorum's members are sorted by replica id, each once;
//   - quorum ids never go back, and one id always names one membership;
//   - every call is answered at most once, never after a Cancel that
//     returned true, and exactly once by Close at the end otherwise;
//   - the request check (requests::LighthouseSettingsFromProto) accepts
//     only settings within its bounds.
// A violation aborts (libFuzzer reports the input).
//
// The input is a script of 3-byte records [op][a][b]:
//   op % 5 == 0  a Quorum call of group (a % 8), step b, shrink_only (b & 1);
//           1    a heartbeat of group (a % 8);
//           2    the clock advances a x 20 ms, then a tick;
//           3    the call numbered (a x 256 + b) is cancelled;
//           4    the settings request bytes: the next records' bytes (up to b of
//                them), checked; the lighthouse is made with the first that pass.
// Deterministic: the clock is the script's; nothing sleeps.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "meshrun/proto/rendezvous.pb.h"
#include "rendezvous/grpc/requests.h"
#include "rendezvous/lighthouse/lighthouse.h"

namespace {

namespace lh = ::meshrun::rendezvous::lighthouse;

void Check(bool ok) {
  if (!ok) std::abort();
}

struct Calls {
  // Per call: its group, answers seen, whether Cancel said it never will be.
  struct Call {
    std::string group;
    int answers = 0;
    bool cancelled = false;
  };
  std::vector<Call> calls;
  int64_t last_id = 0;
  std::map<int64_t, std::vector<std::string>> membership;  // Quorum id -> its members.
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto calls = std::make_shared<Calls>();
  std::unique_ptr<lh::Lighthouse> l;
  absl::Time now = absl::FromUnixSeconds(1'000'000);
  std::vector<uint64_t> tickets;
  auto lighthouse = [&]() -> lh::Lighthouse& {
    if (!l) {
      lh::LighthouseSettings s;
      s.min_replicas = 2;
      s.join_timeout = absl::Seconds(1);
      s.heartbeat_timeout = absl::Seconds(2);
      l = std::make_unique<lh::Lighthouse>(s, 6);
    }
    return *l;
  };
  size_t i = 0;
  while (i + 3 <= size && calls->calls.size() < 4096) {
    const uint8_t op = data[i] % 5, a = data[i + 1], b = data[i + 2];
    i += 3;
    if (op == 0) {
      lh::QuorumMember m;
      m.replica_id = "g" + std::to_string(a % 8);
      m.step = b;
      m.shrink_only = (b & 1) != 0;
      const size_t n = calls->calls.size();
      calls->calls.push_back({m.replica_id});
      absl::StatusOr<uint64_t> t = lighthouse().Join(m, now, [calls, n](absl::StatusOr<lh::Quorum> q) {
        Calls::Call& c = calls->calls[n];
        Check(!c.cancelled);
        Check(++c.answers == 1);
        if (!q.ok()) return;
        std::vector<std::string> ids;
        for (const lh::QuorumMember& p : q->participants) ids.push_back(p.replica_id);
        Check(std::set<std::string>(ids.begin(), ids.end()).size() == ids.size());
        for (size_t k = 1; k < ids.size(); ++k) Check(ids[k - 1] < ids[k]);
        Check(std::set<std::string>(ids.begin(), ids.end()).contains(c.group));
        Check(q->quorum_id >= calls->last_id);
        calls->last_id = q->quorum_id;
        auto [it, fresh] = calls->membership.emplace(q->quorum_id, ids);
        Check(fresh || it->second == ids);
      });
      if (t.ok()) {
        tickets.push_back(*t);
      } else {
        calls->calls[n].cancelled = true;  // Refused: never answered.
        tickets.push_back(0);
      }
    } else if (op == 1) {
      (void)lighthouse().Heartbeat("g" + std::to_string(a % 8), now);
    } else if (op == 2) {
      now += absl::Milliseconds(20) * a;
      lighthouse().Tick(now);
    } else if (op == 3) {
      const size_t n = (static_cast<size_t>(a) * 256 + b);
      if (n < tickets.size() && tickets[n] != 0 && lighthouse().Cancel(tickets[n])) {
        Check(calls->calls[n].answers == 0);
        calls->calls[n].cancelled = true;
      }
    } else {
      const size_t len = std::min<size_t>(b, size - i);
      ::meshrun::v1::LighthouseSettings p;
      if (p.ParseFromArray(data + i, static_cast<int>(len))) {
        absl::StatusOr<lh::LighthouseSettings> s =
            ::meshrun::rendezvous::requests::LighthouseSettingsFromProto(p, "g", 0);
        if (s.ok()) {
          Check(s->min_replicas >= 1 && s->min_replicas <= 4096);
          Check(s->quorum_tick > absl::ZeroDuration() && s->quorum_tick <= absl::Seconds(60));
          Check(s->join_timeout >= absl::ZeroDuration() && s->heartbeat_timeout > absl::ZeroDuration());
          if (!l) l = std::make_unique<lh::Lighthouse>(*s, 6);
        }
      }
      i += len;
    }
  }
  if (l) l->Close(absl::UnavailableError("end of input"));
  for (const Calls::Call& c : calls->calls) Check(c.cancelled ? c.answers == 0 : c.answers == 1);
  return 0;
}
