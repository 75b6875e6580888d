#include "rendezvous/state/etcd/election.h"

#include "rendezvous/state/etcd/leader_read.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"

namespace meshrun::rendezvous::state::etcd {
namespace {

constexpr size_t kMaxCandidateId = 256;

// Set while this thread runs an election callback (Campaign and Resign
// refuse to run inside one: they would wait for the thread they run on).
thread_local bool in_callback = false;

struct CallbackScope {
  CallbackScope() { in_callback = true; }
  ~CallbackScope() { in_callback = false; }
};

absl::Status CheckPrefix(const std::string& prefix) {
  if (prefix.size() < 2 || prefix.back() != '/') {
    return absl::InvalidArgumentError(absl::StrCat("election prefix '", prefix,
                                                   "': must end with '/' (e.g. /meshrun/election/)"));
  }
  return absl::OkStatus();
}

std::string MarkerKey(const ElectionOptions& o) {
  if (!o.marker_key.empty()) return o.marker_key;
  return absl::StrCat(o.prefix.substr(0, o.prefix.size() - 1), ".fence");
}

absl::Status CheckOptions(const ElectionOptions& o) {
  if (absl::Status s = CheckPrefix(o.prefix); !s.ok()) return s;
  if (absl::StartsWith(MarkerKey(o), o.prefix)) {
    return absl::InvalidArgumentError(absl::StrCat("election marker key '", MarkerKey(o),
                                                   "' is under the election prefix '", o.prefix,
                                                   "': it would count as a candidate"));
  }
  if (o.max_write_attempts < 1) return absl::InvalidArgumentError("election max_write_attempts must be at least 1");
  return absl::OkStatus();
}

// `to` with the payloads of `from` (OutcomeUnknown's mark).
absl::Status WithPayloads(absl::Status to, const absl::Status& from) {
  from.ForEachPayload([&to](absl::string_view url, const absl::Cord& payload) { to.SetPayload(url, payload); });
  return to;
}

}  // namespace

std::string EncodeCandidate(const std::string& candidate_id, const std::string& value) {
  return absl::StrCat(candidate_id, "\n", value);
}

absl::Status DecodeCandidate(const std::string& encoded, std::string* candidate_id, std::string* value) {
  const size_t nl = encoded.find('\n');
  if (nl == std::string::npos) {
    return absl::InvalidArgumentError("an election key's value lacks the newline after the candidate id");
  }
  *candidate_id = encoded.substr(0, nl);
  *value = encoded.substr(nl + 1);
  return absl::OkStatus();
}

struct Election::Impl {
  Client* client = nullptr;
  ElectionOptions options;

  // One candidacy at a time: Campaign and Resign hold it throughout.
  absl::Mutex lifecycle;

  struct State {
    bool campaigning = false;  // A candidacy runs (until Resign).
    bool elected = false;
    bool deposed = false;      // The candidacy ended (on_deposed called, or resigned).
    bool paused = false;       // on_paused told, on_resumed not yet.
    bool stop = false;         // The campaign thread ends.
    uint64_t changes = 0;      // Watch events under the prefix seen.
    LeaderInfo self;
    ElectionCallbacks callbacks;
    std::unique_ptr<LeaseKeeper> keeper;
    std::unique_ptr<Watcher> watcher;
    std::thread thread;
  };
  mutable absl::Mutex mu;
  State state ABSL_GUARDED_BY(mu);

  // FencedTxn's own: one fenced write at a time (held across its etcd
  // calls; taken before `mu`, never inside it).
  struct Fence {
    std::string candidacy;        // The key of the candidacy it is about.
    int64_t marker_revision = -1; // The marker's mod revision after the last write; -1: not read yet.
    uint64_t seq = 0;             // Writes of this candidacy.
  };
  absl::Mutex fence_mu;
  Fence fence ABSL_GUARDED_BY(fence_mu);
  // The keeper's last word on the lease (steady clock, ns since its epoch).
  std::atomic<int64_t> lease_valid_until_ns{0};

  // The keeper's word: the lease lives until `t`.
  void ValidUntil(std::chrono::steady_clock::time_point t) {
    lease_valid_until_ns.store(t.time_since_epoch().count(), std::memory_order_release);
    std::function<void(std::chrono::steady_clock::time_point)> cb;
    {
      absl::MutexLock lock(&mu);
      if (!state.campaigning || state.deposed) return;
      cb = state.callbacks.on_lease_valid_until;
    }
    if (cb) {
      CallbackScope scope;
      cb(t);
    }
  }

  // Ends the candidacy for `why` (once) and tells on_deposed.
  void Deposed(const absl::Status& why) {
    std::function<void(const absl::Status&)> cb;
    {
      absl::MutexLock lock(&mu);
      if (!state.campaigning || state.deposed) return;
      state.deposed = true;
      state.stop = true;
      cb = state.callbacks.on_deposed;
    }
    Logger("rdzv")->warn("etcd election: {}", std::string(why.message()));
    if (cb) {
      CallbackScope scope;
      cb(why);
    }
  }

  // The lease keeper's word: the lease is unconfirmed / confirmed again.
  // Only a leader is told (a waiting candidate is not elected meanwhile).
  void Unconfirmed(const absl::Status& why) {
    std::function<void(const absl::Status&)> cb;
    {
      absl::MutexLock lock(&mu);
      if (!state.campaigning || state.deposed || !state.elected || state.paused) return;
      state.paused = true;
      cb = state.callbacks.on_paused;
    }
    Logger("rdzv")->warn("etcd election: leadership paused: {}", std::string(why.message()));
    if (cb) {
      CallbackScope scope;
      cb(why);
    }
  }
  void Confirmed() {
    std::function<void()> cb;
    {
      absl::MutexLock lock(&mu);
      if (!state.campaigning || state.deposed || !state.paused) return;
      state.paused = false;
      cb = state.callbacks.on_resumed;
    }
    Logger("rdzv")->warn("etcd election: leadership resumed: the lease lived throughout");
    if (cb) {
      CallbackScope scope;
      cb();
    }
  }

  // The campaign thread: checks whether this candidate is first whenever
  // the prefix changed (or every recheck_interval), until it stops.
  void Run() {
    std::string my_key;
    {
      absl::MutexLock lock(&mu);
      my_key = state.self.key;
    }
    Txn check;
    check.success.push_back(Op::Get(my_key));
    check.success.push_back(Op::Get(options.prefix, FirstCreated(options.prefix)));
    // Each pass waits for a change or recheck_interval; it ends with `stop`.
    for (;;) {
      uint64_t seen;
      {
        absl::MutexLock lock(&mu);
        if (state.stop) return;
        seen = state.changes;
      }
      // One read of both (a read-only Txn is one linearizable snapshot).
      absl::StatusOr<TxnResult> r = client->Transact(check);
      if (r.ok() && r->results.size() == 2) {
        const RangeResult& mine = r->results[0].range;
        const RangeResult& first = r->results[1].range;
        if (mine.kvs.empty()) {
          Deposed(absl::NotFoundError(absl::StrCat("the election key ", my_key,
                                                   " is gone (its lease expired or was revoked, or it was deleted)")));
          return;
        }
        if (!first.kvs.empty() && first.kvs.front().key == my_key) {
          std::function<void(const LeaderInfo&)> cb;
          LeaderInfo self;
          {
            absl::MutexLock lock(&mu);
            if (state.stop) return;
            // Elected only with a confirmed lease (else at the next check).
            const bool confirmed =
                state.keeper != nullptr && state.keeper->guaranteed_remaining() > absl::ZeroDuration();
            if (!state.elected && confirmed) {
              state.elected = true;
              cb = state.callbacks.on_elected;
              self = state.self;
            }
          }
          if (cb) {
            Logger("rdzv")->info("etcd election: {} leads ({})", self.candidate_id, self.key);
            CallbackScope scope;
            cb(self);
          }
        }
      } else if (!r.ok()) {
        // The lease keeper decides when the candidacy is lost; a failed
        // read is tried again.
        Logger("rdzv")->info("etcd election: checking the leader failed: {}", std::string(r.status().message()));
      }
      absl::MutexLock lock(&mu);
      // (Evaluated with `mu` held.)
      auto changed = [this, seen]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return state.stop || state.changes != seen; };
      mu.AwaitWithTimeout(absl::Condition(&changed), options.recheck_interval);
    }
  }

  // Stops the candidacy's threads and forgets it; the lease id to revoke
  // (0: none, or the candidacy was deposed: its lease is gone or, no longer
  // renewed, expires by its TTL). Call with `lifecycle` held, never from a
  // callback.
  int64_t Stop() {
    std::unique_ptr<LeaseKeeper> keeper;
    std::unique_ptr<Watcher> watcher;
    std::thread thread;
    int64_t lease = 0;
    {
      absl::MutexLock lock(&mu);
      if (!state.campaigning) return 0;
      const bool was_deposed = state.deposed;
      state.stop = true;
      state.deposed = true;
      state.campaigning = false;
      state.elected = false;
      keeper = std::move(state.keeper);
      watcher = std::move(state.watcher);
      thread = std::move(state.thread);
      lease = was_deposed ? 0 : state.self.lease;
    }
    if (thread.joinable()) thread.join();
    watcher.reset();
    keeper.reset();
    return lease;
  }
};

Election::Election(Client* client, ElectionOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->client = client;
  impl_->options = std::move(options);
}

Election::~Election() {
  if (in_callback) {
    Logger("rdzv")->error("etcd election: destroyed from its own callback (not allowed); leaking its threads");
    return;
  }
  (void)Resign();
}

absl::Status Election::Campaign(const std::string& candidate_id, const std::string& value,
                                ElectionCallbacks callbacks) {
  if (in_callback) return absl::FailedPreconditionError("Election::Campaign called from an election callback");
  if (candidate_id.empty() || candidate_id.size() > kMaxCandidateId || absl::StrContains(candidate_id, '\n')) {
    return absl::InvalidArgumentError(absl::StrCat("election candidate id '", candidate_id.substr(0, kMaxCandidateId),
                                                   "': must be 1..", kMaxCandidateId, " bytes without a newline"));
  }
  if (absl::Status s = CheckOptions(impl_->options); !s.ok()) return s;
  absl::MutexLock life(&impl_->lifecycle);
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->state.campaigning && !impl_->state.deposed) {
      return absl::FailedPreconditionError(absl::StrCat("election: ", impl_->state.self.candidate_id,
                                                        " is campaigning already (Resign first)"));
    }
  }
  // A candidacy that ended by itself (deposed): its threads go.
  impl_->Stop();

  Impl* impl = impl_.get();
  impl->lease_valid_until_ns.store(0, std::memory_order_release);
  LeaseCallbacks lc;
  lc.on_lost = [impl](const absl::Status& why) { impl->Deposed(why); };
  lc.on_unconfirmed = [impl](const absl::Status& why) { impl->Unconfirmed(why); };
  lc.on_confirmed = [impl] { impl->Confirmed(); };
  lc.on_valid_until = [impl](std::chrono::steady_clock::time_point t) { impl->ValidUntil(t); };
  absl::StatusOr<std::unique_ptr<LeaseKeeper>> keeper =
      impl->client->GrantAndKeepAlive(impl->options.lease_ttl_s, std::move(lc), impl->options.keepalive);
  if (!keeper.ok()) return keeper.status();
  const Lease lease = (*keeper)->lease();
  const std::string key = absl::StrCat(impl->options.prefix, absl::Hex(lease.id));

  // Created only if absent (as concurrency.Election does; the key is this
  // lease's own, so it is absent unless an earlier try of this call wrote it).
  Txn create;
  create.compare.push_back(Compare::Absent(key));
  create.success.push_back(Op::Put(key, EncodeCandidate(candidate_id, value), lease.id));
  create.failure.push_back(Op::Get(key));
  // Repeated while its outcome is unknown (a member that lost etcd's leader
  // mid-call, as when etcd's leadership moves: leader_apart.h), at most
  // max_write_attempts tries: a try after one that applied finds the key.
  absl::StatusOr<TxnResult> r = impl->client->Transact(create);
  for (int attempt = 1; !r.ok() && OutcomeUnknown(r.status()) && attempt < impl->options.max_write_attempts;
       ++attempt) {
    r = impl->client->Transact(create);
  }
  int64_t created = 0;
  if (r.ok()) {
    if (r->succeeded) {
      created = r->revision;
    } else if (!r->results.empty() && !r->results[0].range.kvs.empty()) {
      created = r->results[0].range.kvs[0].create_revision;
    }
  }
  if (!r.ok() || created == 0) {
    (*keeper)->Stop();
    (void)impl->client->LeaseRevoke(lease.id);
    return r.ok() ? absl::InternalError(absl::StrCat("election: the key ", key, " was not created")) : r.status();
  }
  {
    absl::MutexLock lock(&impl->mu);
    impl->state = Impl::State();
    impl->state.campaigning = true;
    impl->state.self = LeaderInfo{candidate_id, value, key, created, lease.id};
    impl->state.callbacks = std::move(callbacks);
    impl->state.keeper = std::move(*keeper);
  }
  // The grant's guarantee came before the callbacks were set.
  if (const int64_t ns = impl->lease_valid_until_ns.load(std::memory_order_acquire); ns != 0) {
    impl->ValidUntil(std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(ns)));
  }
  // Every change under the prefix after the create wakes the campaign
  // thread; the deletion of this candidate's own key ends the candidacy.
  WatchOptions wo;
  wo.range_end = PrefixEnd(impl->options.prefix);
  wo.start_revision = r->revision + 1;
  WatchCallbacks wc;
  wc.on_event = [impl, key](const WatchEvent& ev) {
    {
      absl::MutexLock lock(&impl->mu);
      ++impl->state.changes;
    }
    if (ev.type == WatchEvent::Type::kDelete && ev.kv.key == key) {
      impl->Deposed(absl::NotFoundError(
          absl::StrCat("the election key ", key, " was deleted (its lease expired or was revoked, or by hand)")));
    }
  };
  std::unique_ptr<Watcher> watcher = impl->client->Watch(impl->options.prefix, wo, std::move(wc));
  absl::MutexLock lock(&impl->mu);
  impl->state.watcher = std::move(watcher);
  impl->state.thread = std::thread([impl] { impl->Run(); });
  return absl::OkStatus();
}

bool Election::IsLeader() const {
  absl::MutexLock lock(&impl_->mu);
  const Impl::State& s = impl_->state;
  return s.campaigning && s.elected && !s.deposed && s.keeper != nullptr &&
         s.keeper->guaranteed_remaining() > absl::ZeroDuration();
}

std::optional<LeaderInfo> Election::Self() const {
  absl::MutexLock lock(&impl_->mu);
  if (!impl_->state.campaigning) return std::nullopt;
  return impl_->state.self;
}

absl::Status Election::Resign() {
  if (in_callback) return absl::FailedPreconditionError("Election::Resign called from an election callback");
  absl::MutexLock life(&impl_->lifecycle);
  const int64_t lease = impl_->Stop();
  if (lease == 0) return absl::OkStatus();
  absl::Status s = impl_->client->LeaseRevoke(lease);
  if (s.code() == absl::StatusCode::kNotFound) return absl::OkStatus();  // Expired already: the key is gone too.
  return s;
}

absl::StatusOr<std::optional<LeaderInfo>> Election::Leader() {
  if (absl::Status s = CheckOptions(impl_->options); !s.ok()) return s;
  return ReadLeader(impl_->client, impl_->options.prefix);
}

absl::StatusOr<TxnResult> Election::FencedTxn(const Txn& txn) {
  Impl* impl = impl_.get();
  const std::string marker = MarkerKey(impl->options);
  // Whether this candidate is (still) the leader by its own knowledge.
  auto leading = [impl](LeaderInfo* self) -> absl::Status {
    absl::MutexLock lock(&impl->mu);
    const Impl::State& s = impl->state;
    if (!s.campaigning || s.deposed || !s.elected) {
      return absl::FailedPreconditionError(
          absl::StrCat("etcd election: not the leader", s.campaigning ? "" : " (not campaigning)",
                       s.deposed && s.campaigning ? " (deposed)" : "", ": the write is refused"));
    }
    if (self != nullptr) *self = s.self;
    return absl::OkStatus();
  };
  std::optional<absl::Status> depose;  // Told after the fence lock is released.
  absl::StatusOr<TxnResult> result = [&]() -> absl::StatusOr<TxnResult> {
    absl::MutexLock fence_lock(&impl->fence_mu);
    LeaderInfo self;
    if (absl::Status s = leading(&self); !s.ok()) return s;
    Impl::Fence& f = impl->fence;
    if (f.candidacy != self.key) f = Impl::Fence{self.key, -1, 0};
    if (f.marker_revision < 0) {
      absl::StatusOr<RangeResult> m = impl->client->Get(marker);
      if (!m.ok()) return m.status();
      f.marker_revision = m->kvs.empty() ? 0 : m->kvs.front().mod_revision;
    }
    // This write's id, in the marker of whichever branch runs.
    const std::string id = absl::StrCat(self.key, " ", self.create_revision, " ", ++f.seq);
    Txn nested = txn;
    nested.success.push_back(Op::Put(marker, id + " s"));
    nested.failure.push_back(Op::Put(marker, id + " f"));
    absl::Status last;
    for (int attempt = 0; attempt < impl->options.max_write_attempts; ++attempt) {
      if (attempt > 0) {
        if (absl::Status s = leading(nullptr); !s.ok()) {
          return WithPayloads(absl::Status(s.code(), absl::StrCat(s.message(), " (an earlier try's outcome is "
                                                                  "unknown: ", last.message(), ")")),
                              last);
        }
      }
      Txn outer;
      outer.compare = {Compare::CreateRevision(self.key, Compare::Result::kEqual, self.create_revision),
                       Compare::Lease(self.key, Compare::Result::kEqual, self.lease),
                       Compare::ModRevision(marker, Compare::Result::kEqual, f.marker_revision)};
      outer.success = {Op::Nested(nested)};
      outer.failure = {Op::Get(self.key), Op::Get(marker)};
      absl::StatusOr<TxnResult> r = impl->client->Transact(outer);
      if (!r.ok()) {
        if (!OutcomeUnknown(r.status())) return r.status();
        Logger("rdzv")->info("etcd election: fenced write {} of unknown outcome, trying again: {}", id,
                             std::string(r.status().message()));
        last = r.status();
        continue;
      }
      if (r->succeeded) {
        if (r->results.empty() || r->results[0].txn == nullptr) {
          return absl::InternalError("etcd election: the fenced Txn's answer lacks the nested Txn's");
        }
        f.marker_revision = r->revision;
        return *r->results[0].txn;
      }
      const RangeResult* mine = r->results.size() == 2 ? &r->results[0].range : nullptr;
      const RangeResult* mark = r->results.size() == 2 ? &r->results[1].range : nullptr;
      if (mine == nullptr || mine->kvs.empty() || mine->kvs.front().create_revision != self.create_revision ||
          mine->kvs.front().lease != self.lease) {
        absl::Status why = absl::FailedPreconditionError(
            absl::StrCat("etcd election: fenced write refused: the leader key ", self.key, " (create revision ",
                         self.create_revision, ", lease ", absl::Hex(self.lease),
                         ") is gone: this replica no longer leads and must stop serving"));
        depose = why;
        return why;
      }
      if (!mark->kvs.empty() && absl::StartsWith(mark->kvs.front().value, id + " ")) {
        // An earlier try was applied; its answer was lost.
        f.marker_revision = mark->kvs.front().mod_revision;
        TxnResult replay;
        replay.succeeded = absl::EndsWith(mark->kvs.front().value, " s");
        replay.revision = mark->kvs.front().mod_revision;
        replay.replayed = true;
        return replay;
      }
      // Not applied, and the marker is not where this leader left it (a
      // write of the previous leader read too early): go on from it.
      f.marker_revision = mark->kvs.empty() ? 0 : mark->kvs.front().mod_revision;
      last = absl::AbortedError(absl::StrCat("etcd election: the fence marker ", marker, " moved"));
    }
    return WithPayloads(absl::Status(last.code(), absl::StrCat(last.message(), " (fenced write tried ",
                                                                impl->options.max_write_attempts, " times)")),
                        last);
  }();
  if (depose.has_value()) impl->Deposed(*depose);
  return result;
}

std::unique_ptr<LeaderObserver> Election::Observe(std::function<void(const std::optional<LeaderInfo>&)> on_change) {
  return StartLeaderObserver(impl_->client, impl_->options.prefix, std::move(on_change));
}

}  // namespace meshrun::rendezvous::state::etcd
