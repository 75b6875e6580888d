#include "rendezvous/state/etcd/replica.h"
#include "rendezvous/state/etcd/replica_list.h"

#include <algorithm>
#include <deque>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "rendezvous/state/etcd/client/etcd_client.h"
#include "rendezvous/state/etcd/election.h"
#include "rendezvous/state/etcd/etcd_journal.h"
#include "rendezvous/state/etcd/leader_apart.h"

namespace meshrun::rendezvous::state::etcd {
struct Replica::Impl {
  ReplicaOptions options;
  ServingGate* gate = nullptr;
  ReplicaHooks hooks;
  std::unique_ptr<Client> client;
  std::unique_ptr<Election> election;
  std::unique_ptr<RunJournal> journal;
  std::unique_ptr<LeaderObserver> observer;
  std::unique_ptr<LeaderApart> apart;  // Keeps etcd's leader off this host while leading.
  absl::Mutex list_mu;  // Guards replica_list's reset against on_paused.
  std::unique_ptr<ReplicaList> replica_list;  // What Status shows (Campaign on).
  std::string election_prefix;

  enum class Kind { kElected, kDeposed, kReload };
  struct Event {
    Kind kind;
    std::string why;
    uint64_t term = 0;  // kElected: the term it starts; kReload: the term it reloads in.
  };
  absl::Mutex mu;
  std::deque<Event> events ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  // A term is one leadership: it starts at on_elected and ends at
  // on_deposed (each bumps it). `loaded` is per term: true only once the
  // current term's state is restored, false from the term's end on (and
  // while a reload runs), so a load that finishes after its term ended never
  // counts (nor opens the gate at a later pause's end).
  uint64_t term ABSL_GUARDED_BY(mu) = 0;
  bool loaded ABSL_GUARDED_BY(mu) = false;  // Leading, with this term's state restored.
  bool reload_queued ABSL_GUARDED_BY(mu) = false;  // A kReload is in `events`.
  absl::Time loaded_at ABSL_GUARDED_BY(mu);  // When `loaded` last turned true.
  std::thread thread;
  // Keeps etcd's leader off this replica's host while it leads (its own
  // thread: its etcd calls may take the client's timeouts, and the Loop's
  // events must not wait for them).
  std::thread apart_thread;

  void ApartLoop() {
    for (;;) {
      bool look = false;
      {
        absl::MutexLock lock(&mu);
        auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stopping; };
        mu.AwaitWithTimeout(absl::Condition(&stop), options.leader_apart_interval);
        if (stopping) return;
        look = loaded && absl::Now() - loaded_at >= options.leader_apart_interval;
      }
      if (look && election->IsLeader()) apart->Check();
    }
  }

  void Push(Event e) {
    absl::MutexLock lock(&mu);
    events.push_back(std::move(e));
  }

  // etcd answers this replica again: Status reads the replicas' list itself.
  void MarkAnswering() {
    absl::MutexLock lock(&list_mu);
    if (replica_list) replica_list->MarkAnswering();
  }

  ElectionCallbacks Callbacks() {
    ElectionCallbacks cb;
    cb.on_elected = [this](const LeaderInfo&) {
      absl::MutexLock lock(&mu);
      loaded = false;
      events.push_back({Kind::kElected, "", ++term});
    };
    cb.on_paused = [this](const absl::Status& why) {
      // Before another replica can be elected: stop serving now.
      gate->SetServing(false);
      gate->SetPaused(std::string(why.message()));
      {
        absl::MutexLock lock(&list_mu);  // Status answers without waiting for etcd.
        if (replica_list) replica_list->MarkFailing();
      }
      Logger("rdzv")->warn("this replica's etcd lease is not confirmed in time ({}): stopped serving until it is",
                           std::string(why.message()));
    };
    cb.on_lease_valid_until = [this](std::chrono::steady_clock::time_point t) { gate->SetValidUntil(t); };
    cb.on_resumed = [this] {
      gate->SetPaused("");
      MarkAnswering();
      absl::MutexLock lock(&mu);
      if (loaded) {
        gate->SetServing(true);
        Logger("rdzv")->info("this replica's etcd lease is confirmed again: serving");
      }
    };
    cb.on_deposed = [this](const absl::Status& why) {
      gate->SetServing(false);
      gate->SetPaused("");
      gate->SetLeadingSince(absl::InfinitePast());
      MarkAnswering();
      {
        absl::MutexLock lock(&mu);
        loaded = false;
        ++term;
      }
      Push({Kind::kDeposed, std::string(why.message())});
    };
    return cb;
  }

  absl::Status Campaign() {
    return election->Campaign(options.id, options.advertise, Callbacks());
  }

  // Loads the state from etcd, restores it (on_lead) and opens the gate
  // while this replica leads and `for_term` is still its term; resigns when
  // it cannot load. `why`: a reload's reason; empty after an election.
  void Lead(uint64_t for_term, const std::string& why = "") {
    const absl::Time t0 = absl::Now();
    absl::StatusOr<std::vector<RunRecord>> records = journal->Load();
    // Bounded: a few tries while etcd answers slowly, as long as this replica leads.
    for (int i = 0; !records.ok() && i < 20 && election->Self().has_value(); ++i) {
      Logger("rdzv")->warn("leading, but cannot load the state from etcd yet: {}",
                           std::string(records.status().message()));
      absl::SleepFor(absl::Milliseconds(250));
      records = journal->Load();
    }
    if (!records.ok()) {
      Logger("rdzv")->error("cannot load the state from etcd: {}; resigning",
                            std::string(records.status().message()));
      (void)election->Resign();
      Push({Kind::kDeposed, "could not load the state"});
      return;
    }
    if (hooks.on_lead) {
      Takeover t;
      t.reload = !why.empty();
      t.why = why;
      t.previous_leader = gate->leader() == options.advertise ? "" : gate->leader();
      t.load_time = absl::Now() - t0;
      t.lease_ttl_s = options.lease_ttl_s;
      if (std::optional<LeaderInfo> self = election->Self()) t.election_revision = self->create_revision;
      hooks.on_lead(*records, t);
    }
    {
      absl::MutexLock lock(&mu);
      if (term != for_term) {
        // Deposed while loading: its kDeposed event follows.
        Logger("rdzv")->warn("this replica's term ended while it loaded the state; not serving it");
        return;
      }
      loaded = true;
      loaded_at = absl::Now();
    }
    gate->SetLeader(options.advertise);
    // A reload while leading keeps the time it began to lead.
    if (gate->leading_since() == absl::InfinitePast()) gate->SetLeadingSince(absl::Now());
    if (election->IsLeader()) gate->SetServing(true);
    Logger("rdzv")->info("this replica ({}) leads: {} run(s) restored from etcd in {}; serving",
                         options.advertise, records->size(),
                         absl::FormatDuration(absl::Trunc(absl::Now() - t0, absl::Microseconds(100))));
    std::printf("meshrun server: leading (%s); %zu run(s) restored in %s\n", options.advertise.c_str(),
                records->size(), absl::FormatDuration(absl::Trunc(absl::Now() - t0, absl::Milliseconds(1))).c_str());
    std::fflush(stdout);
    // etcd's leader is looked at one leader_apart_interval from now
    // (ApartLoop), not at once: moving it stalls etcd's writes for a
    // moment, and now is when the other replicas campaign (at start) and
    // the agents report to this new leader (a failover).
  }

  void Loop() {
    for (;;) {
      Event e;
      {
        absl::MutexLock lock(&mu);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stopping || !events.empty(); };
        mu.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(1));
        if (stopping) return;
        if (events.empty()) continue;
        e = std::move(events.front());
        events.pop_front();
      }
      if (e.kind == Kind::kElected) {
        Lead(e.term);
      } else if (e.kind == Kind::kReload) {
        {
          absl::MutexLock lock(&mu);
          reload_queued = false;
        }
        Logger("rdzv")->warn("this replica reloads its state from etcd: {}", e.why);
        if (hooks.on_stand_by) hooks.on_stand_by(absl::StrCat("the rendezvous server replica ", options.advertise,
                                                              " reloads its state: ", e.why));
        // Deposed meanwhile: the deposition's event follows, nothing to load.
        if (election->Self().has_value()) Lead(e.term, e.why);
      } else {
        gate->SetServing(false);
        gate->SetLeadingSince(absl::InfinitePast());
        Logger("rdzv")->warn("this replica stopped leading: {}; standing by", e.why);
        // Who leads now: the observer's watch may not have told it yet (it was
        // cut off with this replica), and the gate still names this replica.
        if (observer) observer->Refresh();
        if (hooks.on_stand_by) hooks.on_stand_by(absl::StrCat("the rendezvous server replica ", options.advertise,
                                                              " stopped leading: ", e.why));
        // Campaign again, bounded per try by the client's timeouts.
        for (;;) {
          {
            absl::MutexLock lock(&mu);
            if (stopping) return;
          }
          absl::Status s = Campaign();
          if (s.ok()) break;
          Logger("rdzv")->warn("cannot enter the election again: {}", std::string(s.message()));
          absl::SleepFor(absl::Milliseconds(500));
        }
      }
    }
  }
};

absl::StatusOr<std::unique_ptr<Replica>> Replica::Start(ReplicaOptions options, ServingGate* gate,
                                                        ReplicaHooks hooks) {
  auto impl = std::make_unique<Impl>();
  impl->gate = gate;
  impl->hooks = std::move(hooks);
  const std::string prefix = options.connection.url.prefix;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options.connection.client);
  if (!client.ok()) return client.status();
  impl->client = std::move(*client);
  absl::StatusOr<std::optional<Endpoint>> local =
      LocalMember(options.local_member, options.connection.client.members);
  if (!local.ok()) return local.status();
  if (absl::Status s = impl->client->Connect(); !s.ok()) return s;
  options.leader_apart_interval = std::max(options.leader_apart_interval, absl::Milliseconds(100));
  impl->apart = std::make_unique<LeaderApart>(impl->client.get(), *local, options.leader_apart_interval);
  ElectionOptions eo;
  eo.prefix = prefix + "/election/";
  eo.lease_ttl_s = options.lease_ttl_s;
  eo.keepalive.interval = options.lease_renew_interval;
  impl->election_prefix = eo.prefix;
  impl->election = std::make_unique<Election>(impl->client.get(), eo);
  impl->journal = MakeEtcdJournal(impl->client.get(), impl->election.get(), prefix + "/runs/", prefix + "/kv/",
                                  options.journal);
  impl->options = std::move(options);
  gate->SetServing(false);
  return std::unique_ptr<Replica>(new Replica(std::move(impl)));
}

absl::Status Replica::Campaign(const std::string& advertise) {
  Impl* raw = impl_.get();
  raw->options.advertise = advertise;
  raw->gate->SetSelf(advertise);
  auto list = std::make_unique<ReplicaList>([this](absl::Duration timeout)
                                                        -> absl::StatusOr<std::vector<ReplicaView>> {
    absl::StatusOr<std::vector<ReplicaInfo>> r = Replicas(timeout);
    if (!r.ok()) return r.status();
    std::vector<ReplicaView> out;
    for (const ReplicaInfo& i : *r) out.push_back({i.id, i.address, i.leader});
    return out;
  }, raw->options.status_read_timeout);
  {
    absl::MutexLock lock(&raw->list_mu);
    raw->replica_list = std::move(list);
  }
  raw->observer = raw->election->Observe([raw](const std::optional<LeaderInfo>& l) {
    raw->gate->SetLeader(l ? l->value : "");
    if (l) Logger("rdzv")->info("the rendezvous server replicas' leader: {} ({})", l->value, l->candidate_id);
  });
  raw->gate->SetReplicasSource([raw] { return raw->replica_list->Get(); });
  raw->thread = std::thread([raw] { raw->Loop(); });
  raw->apart_thread = std::thread([raw] { raw->ApartLoop(); });
  return raw->Campaign();
}

Replica::Replica(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Replica::~Replica() {
  impl_->gate->SetServing(false);
  impl_->gate->SetReplicasSource(nullptr);
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->stopping = true;
  }
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->observer.reset();
  std::unique_ptr<ReplicaList> list;
  {
    absl::MutexLock lock(&impl_->list_mu);
    list = std::move(impl_->replica_list);
  }
  list.reset();  // Its reads use this Replica.
  (void)impl_->election->Resign();
  // After the resignation (a check in flight ends within the client's
  // timeouts; the next replica need not wait for it).
  if (impl_->apart_thread.joinable()) impl_->apart_thread.join();
}

RunJournal* Replica::journal() { return impl_->journal.get(); }

bool Replica::leading() const { return impl_->gate->serving(); }

void Replica::Reload(const std::string& why) {
  Impl* impl = impl_.get();
  absl::MutexLock lock(&impl->mu);
  if (!impl->loaded) return;  // Not serving: nothing was answered from these runs.
  impl->gate->SetServing(false);
  impl->loaded = false;
  if (impl->reload_queued || impl->stopping) return;
  impl->reload_queued = true;
  impl->events.push_back({Impl::Kind::kReload, why, impl->term});
}

absl::StatusOr<std::vector<ReplicaInfo>> Replica::Replicas(absl::Duration timeout) {
  RangeOptions o;
  o.sort = RangeOptions::Sort::kAscend;
  o.sort_target = RangeOptions::SortTarget::kCreate;
  o.range_end = PrefixEnd(impl_->election_prefix);
  absl::StatusOr<RangeResult> r = impl_->client->Get(impl_->election_prefix, o, timeout);
  if (!r.ok()) return r.status();
  std::vector<ReplicaInfo> out;
  for (const KeyValue& kv : r->kvs) {
    ReplicaInfo info;
    if (!DecodeCandidate(kv.value, &info.id, &info.address).ok()) info.address = kv.value;
    info.leader = out.empty();
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace meshrun::rendezvous::state::etcd
