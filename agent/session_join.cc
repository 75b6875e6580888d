#include "agent/session.h"

#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "agent/replica_group_job.h"
#include "common/net.h"
#include "common/setting.h"
#include "agent/signal_policy.h"

namespace meshrun::agent {
namespace {

std::string RandomSuffix() {
  std::random_device rd;
  return absl::StrCat(absl::Hex(rd(), absl::kZeroPad8));
}

}  // namespace

// Connects as a new member (a fresh node id) and starts heartbeats; the
// event stream opens with the first join (so join progress, a failure
// elsewhere and the loss of the server reach this node at once).
absl::Status Session::NewMembership() {
  EndMembership();
  ++gen_;
  node_.node_id = absl::StrCat(node_.hostname, ":", node_.pid, ":", RandomSuffix());
  auto client = client::RendezvousClient::Connect(endpoint_, o_.run_id, o_.auth, o_.read_timeout, [this] {
    // A stop signal while waiting for the server ends the wait at once.
    const int signo = stop_signal_.load();
    return signo == 0 ? absl::OkStatus()
                      : absl::CancelledError(absl::StrCat("received ", SignalName(signo),
                                                          " while waiting for the rendezvous server"));
  });
  if (!client.ok() && !o_.endpoint_note.empty()) {
    return absl::Status(client.status().code(), absl::StrCat(client.status().message(), " (", o_.endpoint_note, ")"));
  }
  if (!client.ok()) return client.status();
  client_ = std::move(*client);
  if (o_.replica_groups > 0 && replica_group_ < 0) {
    if (absl::Status s = PlaceInReplicaGroup(); !s.ok()) return s;
  }
  client_->set_server_silence_timeout(o_.server_silence_timeout);
  client_->set_failover_timeout(o_.leader_grace);
  // Joins are answered on the event stream, which opens right after the
  // first join (Join, below): no call is held open while a round forms.
  client_->set_join_on_stream(true);
  // Replicas (--rdzv_endpoint=h1:p,h2:p,...): the workers' store follows the leader.
  client_->set_on_leader_change([this, id = node_.node_id](std::shared_ptr<grpc::Channel> channel) {
    if (lighthouse_) lighthouse_->SetUpstream(channel, id);
    if (proxy_) proxy_->SetUpstream(std::move(channel), id);
  });
  node_.dialed_addr = client_->dialed_addr();
  // The workers' store: over this connection, in this node's name.
  if (proxy_) {
    proxy_->SetFollowLeader(client_->replicated());
    proxy_->SetUpstream(client_->channel(), node_.node_id);
  } else {
    StoreProxyOptions po;
    po.run_id = o_.run_id;
    po.shared_run_id = LighthouseRunId();
    po.token = o_.auth.token;
    po.cache = o_.store_cache;
    po.max_message_bytes = o_.store_proxy_max_message_bytes;
    // The node's workers publish together (libmesh's bootstraps).
    po.batch.expected_publishers = o_.nproc;
    po.batch.publication_hold = o_.store_proxy_batch_hold;
    po.kept_retry = o_.leader_resend_interval;
    absl::StatusOr<std::unique_ptr<StoreProxy>> proxy = StoreProxy::Start(po, client_->channel(), node_.node_id);
    if (!proxy.ok()) return proxy.status();
    proxy_ = std::move(*proxy);
    proxy_->SetFollowLeader(client_->replicated());
  }
  if (lighthouse_) {
    lighthouse_->SetUpstream(client_->channel(), node_.node_id);
  } else if (o_.lighthouse.enabled) {
    LighthouseProxyOptions lo;
    lo.run_id = LighthouseRunId();
    lo.token = o_.auth.token;
    lo.min_replicas = o_.lighthouse.min_replicas;
    lo.join_timeout_ms = absl::ToInt64Milliseconds(o_.lighthouse.join_timeout);
    lo.quorum_tick_ms = absl::ToInt64Milliseconds(o_.lighthouse.quorum_tick);
    lo.heartbeat_timeout_ms = absl::ToInt64Milliseconds(o_.lighthouse.heartbeat_timeout);
    lo.kept_retry_ms = absl::ToInt64Milliseconds(o_.leader_resend_interval);
    lo.max_calls = o_.lighthouse.max_calls;
    absl::StatusOr<std::unique_ptr<LighthouseProxy>> l =
        LighthouseProxy::Start(std::move(lo), client_->channel(), node_.node_id);
    if (!l.ok()) return l.status();
    lighthouse_ = std::move(*l);
    lighthouse_->SetFollowLeader(client_->replicated());
  }
  if (!agent_store_) agent_store_ = o_.agent_store;
  if (!agent_store_ && o_.agent_store_enabled) {
    // Every agent listens: the round decides which one is node rank 0, and
    // its port is the workers' MASTER_PORT.
    tcpstore::AgentStoreOptions so;
    so.max_connections = o_.agent_store_max_connections;
    so.max_buffered_bytes = o_.agent_store_max_buffered_bytes;
    so.max_waits = o_.agent_store_max_waits;
    so.max_listed_keys = o_.agent_store_max_listed_keys;
    so.read_cache_bytes = o_.agent_store_read_cache_bytes;
    so.log = [log = log_](const std::string& line) { log->warn("{}", line); };
    absl::StatusOr<std::unique_ptr<tcpstore::AgentStore>> store = tcpstore::AgentStore::Start(std::move(so));
    if (!store.ok()) return store.status();
    agent_store_ = std::move(*store);
  }
  if (o_.local_addr.empty()) node_.addr = client_->local_addr();
  // The event stream opens right after the first join is sent (Join): a
  // joining node's stream is a member's, which the server always admits.
  watch_pending_ = true;
  const int gen = gen_;
  hb_stop_ = std::make_shared<absl::Notification>();
  // --min_replica_groups above 1: the job's groups are looked at with each
  // heartbeat (one O(R) call), so that the groups still running fail once
  // too few are alive.
  const bool watch_groups = o_.replica_groups > 0 && o_.min_replica_groups > 1;
  hb_thread_ = std::thread([this, gen, stop = hb_stop_, client = client_.get(), id = node_.node_id, watch_groups] {
    while (!stop->WaitForNotificationWithTimeout(o_.keep_alive_interval)) {
      absl::StatusOr<int64_t> r = client->Heartbeat(id, hb_round_.load(), o_.keep_alive_interval + absl::Seconds(2));
      if (IsStale(r.status())) {
        q_.Push(Stale{std::string(r.status().message()), gen});
        return;
      }
      if (!watch_groups) continue;
      absl::StatusOr<std::vector<rendezvous::ReplicaGroupState>> groups =
          client->ReplicaGroupStates(job_run_id_, o_.replica_groups, o_.keep_alive_interval + absl::Seconds(2));
      if (!groups.ok()) continue;  // The next heartbeat asks again.
      if (ReplicaGroupJob j = JudgeReplicaGroups(*groups, o_.min_replica_groups); j.below_min) {
        q_.Push(ReplicaGroupsBelowMin{j.summary, j.failed, j.groups, gen});
      }
    }
  });
  return absl::OkStatus();
}

absl::Status Session::PlaceInReplicaGroup() {
  const std::string job = o_.run_id;
  job_run_id_ = job;
  const absl::Time deadline = absl::Now() + o_.join_timeout;
  bool said_standby = false, said_refusal = false;
  for (;;) {  // Bounded by join_timeout.
    if (const int signo = stop_signal_.load(); signo != 0) {
      return absl::CancelledError(absl::StrCat("received ", SignalName(signo), " while waiting for a replica group"));
    }
    absl::StatusOr<std::pair<int, std::string>> place = client_->PlaceReplicaGroup(
        node_.node_id, o_.replica_groups, o_.min_nodes, o_.max_nodes, o_.read_timeout);
    if (place.ok() && place->first >= 0) {
      replica_group_ = place->first;
      if (o_.lighthouse.run_id.empty()) o_.lighthouse.run_id = job;  // One lighthouse for every group.
      o_.run_id = place->second;
      client_->UseRunId(o_.run_id);
      log_->info("replica group {} of {} of run '{}': joining its run '{}'", replica_group_, o_.replica_groups, job,
                 o_.run_id);
      return absl::OkStatus();
    }
    // Every group full, the server away for a moment, or its places all
    // held (they pass within replica_group_place_hold): ask again.
    const bool retry = place.ok() || absl::IsUnavailable(place.status()) ||
                       absl::IsDeadlineExceeded(place.status()) || absl::IsResourceExhausted(place.status());
    if (!retry) return place.status();
    if (!place.ok() && !said_refusal) {
      log_->warn("replica group placement: {}; asking again every {}", std::string(place.status().message()),
                 absl::FormatDuration(o_.keep_alive_interval));
      said_refusal = true;
    }
    if (place.ok() && !said_standby) {
      // (A warning, so that it shows at the default log level, as the
      // wait for nodes does.)
      log_->warn("every replica group of run '{}' has its {} node(s): this node stands by until one loses a node",
                 job, o_.max_nodes);
      said_standby = true;
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no replica group of run '", job, "' at ", o_.endpoint, " had room for this node within join_timeout (",
          absl::FormatDuration(o_.join_timeout), "): ",
          place.ok() ? absl::StrCat("all ", o_.replica_groups, " groups have their ", o_.max_nodes, " node(s)")
                     : std::string(place.status().message())));
    }
    // Ask again after keep_alive_interval; a stop signal ends the wait.
    const absl::Time next = std::min(deadline, absl::Now() + o_.keep_alive_interval);
    while (absl::Now() < next && stop_signal_.load() == 0) absl::SleepFor(absl::Milliseconds(50));
  }
}

void Session::EndMembership() {
  if (hb_stop_) hb_stop_->Notify();
  if (client_) client_->Stop();  // A heartbeat in flight ends now, not at its deadline.
  if (hb_thread_.joinable()) hb_thread_.join();
  client_.reset();
}

// The whole job: join, run, and on failure restart through the server.
int Session::Loop() {
  int64_t last_round = -1;
  for (int attempt = 0;; ++attempt) {
    if (stale_) {
      // Declared lost while silent: this node's round is gone; its workers
      // were stopped. Rejoin as a new member.
      stale_ = false;
      last_round = -1;
      if (absl::Status s = NewMembership(); !s.ok()) return MembershipFailed(s);
    }
    std::optional<int> done;
    Assignment a;
    if (!Join(last_round, &a, &done)) {
      if (stale_) continue;
      return *done;
    }
    last_round = a.round;
    hb_round_ = a.round;
    std::optional<int> result = RunRound(a);
    if (result) return *result;
  }
}

// Handles a sign that this node is stale; true when it was one (of the
// current membership).
bool Session::OnStale(const std::string& why) {
  std::fprintf(stderr, "meshrun: this node was declared lost (%s); stopping its workers and rejoining\n",
               why.c_str());
  stale_ = true;
  return true;
}

// Joins the next round; false with `*exit_code` set when the agent must stop.
bool Session::Join(int64_t last_round, Assignment* out, std::optional<int>* exit_code) {
  if (agent_store_) {
    node_.master_port = agent_store_->port();
  } else {
    absl::StatusOr<int> port = FindFreePort(node_.addr);  // Worker rank 0's TCPStore.
    node_.master_port = port.ok() ? *port : 0;
  }
  const absl::Time join_deadline = absl::Now() + o_.join_timeout;
  joined_peak_ = 0;
  client_->JoinAsync(node_, config_, last_round, o_.join_timeout,
                     [this](absl::StatusOr<Assignment> r) { q_.Push(JoinDone{std::move(r)}); });
  if (watch_pending_) {
    // After the join is on its way, over the same connection: whichever
    // reaches the server first, the stream is a joining member's (the server
    // hands it the join's credential, or the join takes the stream's). The
    // join's answer comes on it (set_join_on_stream).
    watch_pending_ = false;
    const int gen = gen_;
    client_->StartWatch(
        node_.node_id, -1, [this, gen](const RunEvent& e) { q_.Push(ServerEvent{e, gen}); },
        [this, gen](const absl::Status& s) { q_.Push(StreamClosed{s, gen}); });
  }
  for (;;) {
    // Events held back while the workers stopped come first (a signal, or
    // another node lost while this round re-forms).
    std::optional<Event> ev = NextEvent(absl::InfiniteFuture());
    if (auto* j = std::get_if<JoinDone>(&*ev)) {
      if (j->result.ok()) {
        *out = *j->result;
        log_->info("joined run '{}' round {} as node rank {} of {}", o_.run_id, out->round,
                   out->node_rank, out->node_count);
        return true;
      }
      const absl::Status& s = j->result.status();
      if (IsStale(s)) {
        OnStale(std::string(s.message()));
        return false;
      }
      if (absl::IsAborted(s) && absl::StartsWith(s.message(), "join: finished")) {
        // Not a success: this node ran nothing (a full job, or a run id
        // that another job is using).
        *exit_code = Fatal(absl::StrCat("run '", o_.run_id, "' at ", o_.endpoint,
                                        " was full and finished while this node stood by; this node ran "
                                        "nothing (is another job using this --rdzv_id?)"));
        return false;
      }
      if (absl::IsDeadlineExceeded(s)) {
        *exit_code = Fatal(absl::StrCat("timed out after ", absl::FormatDuration(o_.join_timeout),
                                        " waiting for nodes to join run '", o_.run_id, "' at ", o_.endpoint,
                                        ": ", std::max(joined_peak_, 1), " of ", NnodesText(),
                                        " nodes joined"));
      } else {
        *exit_code = Fatal(absl::StrCat("could not join run '", o_.run_id, "' at ", o_.endpoint, ": ",
                                        s.message(), RefusalHint(s)));
      }
      return false;
    }
    if (auto* sig = std::get_if<SignalReceived>(&*ev)) {
      if (PassThrough(sig->signo)) continue;  // No workers to pass it to.
      client_->CancelJoin();
      std::fprintf(stderr, "meshrun: received %s while joining; exiting\n", SignalName(sig->signo).c_str());
      received_signal_ = sig->signo;
      if (o_.on_stop_signal) o_.on_stop_signal(sig->signo);
      *exit_code = 128 + sig->signo;
      return false;
    }
    if (auto* st = std::get_if<Stale>(&*ev)) {
      if (st->gen != gen_) continue;
      client_->CancelJoin();
      OnStale(st->why);
      return false;
    }
    if (auto* se = std::get_if<ServerEvent>(&*ev)) {
      if (se->gen != gen_) continue;
      const RunEvent& e = se->event;
      if (e.kind == RunEvent::Kind::kRunFailed) {
        client_->CancelJoin();
        *exit_code = Summary(e.root_cause);
        return false;
      }
      if (e.kind == RunEvent::Kind::kNodeLost && e.root_cause) {
        // Another member lost while this round re-forms: say so, since
        // the round no longer waits for it.
        std::fprintf(stderr, "meshrun: %s\n", e.root_cause->message.c_str());
        continue;
      }
      if (e.kind == RunEvent::Kind::kJoinProgress && e.joined != joined_seen_) {
        joined_seen_ = e.joined;
        joined_peak_ = std::max(joined_peak_, e.joined);
        if (e.joined < e.max_nodes) {
          absl::Duration left = std::max(absl::ZeroDuration(), join_deadline - absl::Now());
          std::fprintf(stderr, "meshrun: %s joined run '%s', waiting up to %.0f s\n", JoinedText(e.joined).c_str(),
                       o_.run_id.c_str(), absl::ToDoubleSeconds(left));
        }
      }
      continue;
    }
    if (auto* sc = std::get_if<StreamClosed>(&*ev)) {
      if (sc->gen != gen_ || sc->status.ok()) continue;
      client_->CancelJoin();
      if (IsStale(sc->status)) {
        OnStale(std::string(sc->status.message()));
        return false;
      }
      *exit_code = Fatal(absl::StrCat(sc->status.message(), RefusalHint(sc->status)));
      return false;
    }
    // Child exits of a previous attempt were handled already; ignore.
  }
}

std::string Session::RefusalHint(const absl::Status& s) const {
  // The server names the run's setting in its own words; this node's flag for it.
  if (std::optional<std::string> setting = SettingOf(s)) {
    if (*setting == kNodeCount) {
      return absl::StrCat(" (this node's --nnodes=", NnodesText(), "; every node of a job gives the same --nnodes)");
    }
    if (*setting == kMaxRestarts) {
      return absl::StrCat(" (this node's --max_restarts=", o_.max_restarts,
                          "; every node of a job gives the same --max_restarts)");
    }
    if (*setting == kNodeRank) {
      return absl::StrCat(" (this node's --node_rank=", o_.node_rank, "; each node gives its own --node_rank)");
    }
    if (*setting == kAdvertisedAddress) return " (a node's advertised address is its --local_addr)";
    return "";
  }
  if (!absl::IsUnauthenticated(s) || o_.endpoint_note.empty()) return "";
  absl::StatusOr<Endpoint> ep = ParseEndpoint(o_.endpoint, 29400);
  return absl::StrCat(". On this host, ", o_.endpoint_note,
                      ": another job's server holds that port; give this job a port of its own (--rdzv_endpoint=",
                      ep.ok() ? ep->host : "HOST", ":PORT; deploy/slurm/meshrun.sbatch derives one from SLURM_JOB_ID, "
                      "or takes MESHRUN_PORT)");
}

std::string Session::JoinedText(int joined) const {
  if (o_.min_nodes == o_.max_nodes) return absl::StrCat(joined, "/", o_.max_nodes, " nodes");
  return absl::StrCat(joined, joined == 1 ? " node" : " nodes", " (of --nnodes=", NnodesText(), ")");
}

std::string Session::NnodesText() const {
  return o_.min_nodes == o_.max_nodes ? absl::StrCat(o_.max_nodes)
                                      : absl::StrCat(o_.min_nodes, ":", o_.max_nodes);
}

std::optional<Event> Session::NextEvent(absl::Time deadline) {
  if (!deferred_.empty()) {
    Event e = std::move(deferred_.front());
    deferred_.pop_front();
    return e;
  }
  return q_.Pop(deadline);
}

}  // namespace meshrun::agent
