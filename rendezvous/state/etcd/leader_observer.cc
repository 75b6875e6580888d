// LeaderObserver (election.h): who leads, from a watch on the election's
// prefix, reported when it changes. A watch that etcd ends for good because
// its revision was compacted (a stream re-established from a revision etcd
// no longer has) is started again from the current revision, and the leader
// read again once it is established: no change is missed.
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
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
  absl::Mutex check_mu;  // One Check at a time: a read and its report in order.
  // The running watch, and the one it replaced (its thread has returned or
  // is returning: the replacement is made from it); none once stopping.
  absl::Mutex watch_mu;
  std::unique_ptr<Watcher> watcher ABSL_GUARDED_BY(watch_mu);
  std::unique_ptr<Watcher> ended ABSL_GUARDED_BY(watch_mu);
  bool stopping ABSL_GUARDED_BY(watch_mu) = false;
  int restarts ABSL_GUARDED_BY(watch_mu) = 0;

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

  // A watch of every key under the prefix from the current revision. Every
  // event, and every (re-)established stream (events may have been missed
  // while it was down), reads the leader again; a compacted watch is
  // replaced (Restart).
  std::unique_ptr<Watcher> StartWatch() {
    WatchOptions wo;
    wo.range_end = PrefixEnd(prefix);
    WatchCallbacks wc;
    wc.on_event = [this](const WatchEvent&) { Check(); };
    wc.on_status = [this](const WatchStatus& s) {
      if (s.status.ok()) {
        Check();
      } else if (s.final && absl::IsOutOfRange(s.status)) {
        Restart();
      }
    };
    return client->Watch(prefix, wo, std::move(wc));
  }

  // Runs on the ended watch's own thread (its last callback), which must
  // not destroy that watch: it is kept in `ended` until the next restart or
  // the observer's end. Bounded: at most two watches are held.
  void Restart() {
    absl::MutexLock lock(&watch_mu);
    if (stopping) return;
    ++restarts;
    Logger("rdzv")->warn("etcd: the watch of who leads under {} was compacted; watching again from now (restart {})",
                         prefix, restarts);
    ended = std::move(watcher);  // The one before it (if any) has returned: destroying it joins at once.
    watcher = StartWatch();
  }
};

LeaderObserver::LeaderObserver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
void LeaderObserver::Refresh() { impl_->Check(); }
LeaderObserver::~LeaderObserver() {
  std::unique_ptr<Watcher> watcher, ended;
  {
    absl::MutexLock lock(&impl_->watch_mu);
    impl_->stopping = true;
    watcher = std::move(impl_->watcher);
    ended = std::move(impl_->ended);
  }
  // Outside watch_mu: a callback finishing (Restart) may wait for it.
  if (watcher) watcher->Cancel();
  if (ended) ended->Cancel();
}

std::unique_ptr<LeaderObserver> StartLeaderObserver(Client* client, const std::string& prefix,
                                                    std::function<void(const std::optional<LeaderInfo>&)> on_change) {
  auto impl = std::make_unique<LeaderObserver::Impl>();
  impl->client = client;
  impl->prefix = prefix;
  impl->on_change = std::move(on_change);
  LeaderObserver::Impl* raw = impl.get();
  {
    absl::MutexLock lock(&raw->watch_mu);
    raw->watcher = raw->StartWatch();
  }
  return std::make_unique<LeaderObserver>(std::move(impl));
}

}  // namespace meshrun::rendezvous::state::etcd
