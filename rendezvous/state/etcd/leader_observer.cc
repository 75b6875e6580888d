// LeaderObserver (election.h): who leads, from a watch on the election's
// prefix, reported when it changes.
#include <utility>

#include "absl/synchronization/mutex.h"
#include "rendezvous/state/etcd/election.h"
#include "rendezvous/state/etcd/leader_read.h"

namespace meshrun::rendezvous::state::etcd {

struct LeaderObserver::Impl {
  Client* client = nullptr;
  std::string prefix;
  std::function<void(const std::optional<LeaderInfo>&)> on_change;
  absl::Mutex mu;
  bool have_last ABSL_GUARDED_BY(mu) = false;
  std::optional<LeaderInfo> last ABSL_GUARDED_BY(mu);
  std::unique_ptr<Watcher> watcher;
  absl::Mutex check_mu;  // One Check at a time: a read and its report in order.

  // Reads the leader and reports it when it changed. Runs on the watch's
  // thread, or Refresh's caller; one at a time.
  void Check() {
    absl::MutexLock serialized(&check_mu);
    absl::StatusOr<std::optional<LeaderInfo>> now = ReadLeader(client, prefix);
    if (!now.ok()) return;  // The next event (or the stream's re-establishment) reads again.
    {
      absl::MutexLock lock(&mu);
      if (have_last && SameLeader(last, *now)) return;
      have_last = true;
      last = *now;
    }
    on_change(*now);
  }
};

LeaderObserver::LeaderObserver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
void LeaderObserver::Refresh() { impl_->Check(); }
LeaderObserver::~LeaderObserver() {
  if (impl_->watcher) impl_->watcher->Cancel();
}

std::unique_ptr<LeaderObserver> StartLeaderObserver(Client* client, const std::string& prefix,
                                                    std::function<void(const std::optional<LeaderInfo>&)> on_change) {
  auto impl = std::make_unique<LeaderObserver::Impl>();
  impl->client = client;
  impl->prefix = prefix;
  impl->on_change = std::move(on_change);
  LeaderObserver::Impl* raw = impl.get();
  // Every event under the prefix, and every (re-)established stream (events
  // may have been missed while it was down), reads the leader again.
  WatchOptions wo;
  wo.range_end = PrefixEnd(raw->prefix);
  WatchCallbacks wc;
  wc.on_event = [raw](const WatchEvent&) { raw->Check(); };
  wc.on_status = [raw](const WatchStatus& s) {
    if (s.status.ok()) raw->Check();
  };
  raw->watcher = raw->client->Watch(raw->prefix, wo, std::move(wc));
  return std::make_unique<LeaderObserver>(std::move(impl));
}

}  // namespace meshrun::rendezvous::state::etcd
