// Client::KeepAlive: one thread per kept lease, renewing it with
// LeaseKeepAlive (through the client's fail-over) and telling when it is
// unconfirmed, confirmed again, or lost.
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rendezvous/state/etcd/client/client_impl.h"
#include "rendezvous/state/etcd/client/etcd_client.h"

namespace meshrun::rendezvous::state::etcd {
namespace {

using SteadyClock = std::chrono::steady_clock;

SteadyClock::time_point Plus(SteadyClock::time_point t, absl::Duration d) {
  return t + std::chrono::duration_cast<SteadyClock::duration>(absl::ToChronoNanoseconds(d));
}
absl::Duration Until(SteadyClock::time_point t) { return absl::FromChrono(t - SteadyClock::now()); }

}  // namespace

struct LeaseKeeper::Impl {
  Client::Impl* client = nullptr;
  Lease lease;
  LeaseCallbacks callbacks;
  absl::Duration interval;
  absl::Duration margin;
  absl::Duration retry;
  SteadyClock::time_point first_renewal;

  struct State {
    bool stop = false;
    bool lost = false;         // etcd said it is gone.
    bool unconfirmed = false;  // Past valid_until with no confirmed renewal.
    // The lease exists on etcd at least until then (TTL - margin after the
    // send of the last confirmed renewal, or of the grant).
    SteadyClock::time_point valid_until;
  };
  mutable absl::Mutex mu;
  State state ABSL_GUARDED_BY(mu);
  std::thread thread;

  // Waits until `t` or Stop; true when stopped.
  bool WaitUntil(SteadyClock::time_point t) {
    absl::MutexLock lock(&mu);
    mu.AwaitWithTimeout(absl::Condition(&state.stop), std::max(absl::ZeroDuration(), Until(t)));
    return state.stop;
  }

  void Run() {
    SteadyClock::time_point next = first_renewal;
    absl::Status last_error;
    // Each pass ends with a renewal, a failed try, the lease unconfirmed, or
    // its loss; it ends on Stop or loss.
    for (;;) {
      SteadyClock::time_point valid_until;
      bool unconfirmed;
      {
        absl::MutexLock lock(&mu);
        valid_until = state.valid_until;
        unconfirmed = state.unconfirmed;
      }
      // Wake for the next renewal, or when the guarantee runs out first.
      const bool due_to_expire = !unconfirmed && valid_until < next;
      if (WaitUntil(due_to_expire ? valid_until : next)) return;
      if (due_to_expire) {
        {
          absl::MutexLock lock(&mu);
          if (state.stop) return;
          state.unconfirmed = true;
        }
        const absl::Status why(
            last_error.ok() ? absl::StatusCode::kDeadlineExceeded : last_error.code(),
            absl::StrCat("etcd lease ", absl::Hex(lease.id), " could not be renewed within its TTL of ", lease.ttl_s,
                         " s", last_error.ok() ? " (no answer yet)" : absl::StrCat(": ", last_error.message())));
        Logger("rdzv")->warn("{}", std::string(why.message()));
        if (callbacks.on_unconfirmed) callbacks.on_unconfirmed(why);
        continue;
      }
      // A renewal: bounded by the guarantee while there is one (an answer
      // after it would be too late to keep it: the keeper must be free to
      // say so then), else by the client's timeout. No diagnosis probes:
      // they would run past that bound.
      const SteadyClock::time_point sent = SteadyClock::now();
      const absl::Duration left = Until(valid_until);
      if (!unconfirmed && left <= absl::Milliseconds(1)) {
        next = Plus(valid_until, absl::Nanoseconds(1));  // Unconfirmed at the next pass.
        continue;
      }
      absl::StatusOr<int64_t> renewed = client->KeepAliveOnce(lease.id, unconfirmed ? absl::ZeroDuration() : left,
                                                              /*diagnose=*/false);
      if (renewed.ok()) {
        bool back;
        {
          absl::MutexLock lock(&mu);
          if (state.stop) return;
          state.valid_until = Plus(sent, absl::Seconds(*renewed) - margin);
          back = state.unconfirmed;
          state.unconfirmed = false;
        }
        if (callbacks.on_valid_until) callbacks.on_valid_until(Plus(sent, absl::Seconds(*renewed) - margin));
        last_error = absl::OkStatus();
        next = Plus(sent, interval);
        if (back) {
          Logger("rdzv")->warn("etcd lease {} renewed again: it was never lost", absl::StrCat(absl::Hex(lease.id)));
          if (callbacks.on_confirmed) callbacks.on_confirmed();
        }
        continue;
      }
      if (renewed.status().code() == absl::StatusCode::kNotFound) {
        {
          absl::MutexLock lock(&mu);
          if (state.stop) return;
          state.lost = true;
        }
        const absl::Status why = absl::NotFoundError(
            absl::StrCat("etcd lease ", absl::Hex(lease.id), " expired or was revoked (etcd renewed it to TTL 0)"));
        Logger("rdzv")->warn("{}", std::string(why.message()));
        if (callbacks.on_lost) callbacks.on_lost(why);
        return;
      }
      last_error = renewed.status();
      next = Plus(SteadyClock::now(), std::min(retry, interval));
    }
  }
};

LeaseKeeper::LeaseKeeper(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LeaseKeeper::~LeaseKeeper() { Stop(); }

const Lease& LeaseKeeper::lease() const { return impl_->lease; }

void LeaseKeeper::Stop() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->state.stop = true;
  }
  if (impl_->thread.joinable() && impl_->thread.get_id() != std::this_thread::get_id()) impl_->thread.join();
}

bool LeaseKeeper::alive() const {
  absl::MutexLock lock(&impl_->mu);
  return !impl_->state.stop && !impl_->state.lost;
}

absl::Duration LeaseKeeper::guaranteed_remaining() const {
  absl::MutexLock lock(&impl_->mu);
  if (impl_->state.stop || impl_->state.lost || impl_->state.unconfirmed) return absl::ZeroDuration();
  return std::max(absl::ZeroDuration(), Until(impl_->state.valid_until));
}

namespace {
std::unique_ptr<LeaseKeeper> StartKeeper(Client::Impl* client, const Lease& lease, LeaseCallbacks callbacks,
                                         KeepAliveOptions options, SteadyClock::time_point valid_from,
                                         bool guaranteed) {
  auto impl = std::make_unique<LeaseKeeper::Impl>();
  impl->client = client;
  impl->lease = lease;
  impl->callbacks = std::move(callbacks);
  const absl::Duration ttl = absl::Seconds(std::max<int64_t>(lease.ttl_s, 1));
  impl->interval =
      options.interval > absl::ZeroDuration() ? options.interval : std::min(ttl / 3, absl::Milliseconds(250));
  impl->margin = options.margin > absl::ZeroDuration() ? options.margin : std::min(ttl / 10, absl::Milliseconds(250));
  impl->retry = options.retry > absl::ZeroDuration() ? options.retry : absl::Milliseconds(100);
  // A lease just granted is sure to live TTL - margin from the grant's send;
  // one of unknown age is not sure until its first renewal is confirmed.
  impl->state.valid_until = Plus(valid_from, ttl - impl->margin);
  impl->state.unconfirmed = !guaranteed;
  impl->first_renewal = guaranteed ? Plus(valid_from, impl->interval) : SteadyClock::now();
  if (guaranteed && impl->callbacks.on_valid_until) impl->callbacks.on_valid_until(impl->state.valid_until);
  LeaseKeeper::Impl* raw = impl.get();
  auto keeper = std::make_unique<LeaseKeeper>(std::move(impl));
  raw->thread = std::thread([raw] { raw->Run(); });
  return keeper;
}
}  // namespace

std::unique_ptr<LeaseKeeper> Client::KeepAlive(const Lease& lease, LeaseCallbacks callbacks,
                                               KeepAliveOptions options) {
  return StartKeeper(impl_.get(), lease, std::move(callbacks), options, std::chrono::steady_clock::now(),
                     /*guaranteed=*/false);
}

absl::StatusOr<std::unique_ptr<LeaseKeeper>> Client::GrantAndKeepAlive(int64_t ttl_s, LeaseCallbacks callbacks,
                                                                        KeepAliveOptions options) {
  const SteadyClock::time_point sent = SteadyClock::now();
  absl::StatusOr<Lease> lease = LeaseGrant(ttl_s);
  if (!lease.ok()) return lease.status();
  return StartKeeper(impl_.get(), *lease, std::move(callbacks), options, sent, /*guaranteed=*/true);
}

}  // namespace meshrun::rendezvous::state::etcd
