#include "bench/rdzv_scale/sim_agents.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "client/rdzv_client.h"
#include "bench/rdzv_scale/sim_workers.h"
#include "proto/types.h"

namespace meshrun::bench {

using client::RendezvousClient;
using rendezvous::Assignment;
using rendezvous::RunEvent;

double MonoNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct SimAgents::Agent {
  int index = 0;
  rendezvous::NodeDesc node;
  std::unique_ptr<RendezvousClient> client;
  bool session_seen = false;        // Touched by the phase thread only.
  std::atomic<int64_t> round{0};
  int node_rank = -1;  // From the assignment (under mu_).
};

SimAgents::SimAgents(SimConfig config) : config_(std::move(config)) {
  for (int i = 0; i < config_.count; ++i) {
    auto a = std::make_unique<Agent>();
    a->index = config_.first_index + i;
    agents_.push_back(std::move(a));
  }
}

SimAgents::~SimAgents() { Leave(); }

template <typename Pred>
bool SimAgents::AwaitLocked(Pred pred) {
  auto cond = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pred(); };
  return mu_.AwaitWithTimeout(absl::Condition(&cond), config_.phase_timeout);
}

PhaseResult SimAgents::Connect() {
  const double start = MonoNow();
  std::atomic<int> next{0};
  PhaseResult r;
  r.start = start;
  absl::Mutex rmu;
  auto connect_some = [&] {
    for (int i = next.fetch_add(1); i < config_.count; i = next.fetch_add(1)) {
      Agent& a = *agents_[i];
      auto c = RendezvousClient::Connect(config_.endpoint, config_.run_id, ClientAuth{config_.token, {}}, config_.read_timeout);
      if (!c.ok()) {
        absl::MutexLock lock(&rmu);
        ++r.failed;
        if (r.error.empty()) r.error = std::string(c.status().message());
        continue;
      }
      // The connection itself (its first call would make it otherwise).
      if (!(*c)->channel()->WaitForConnected(absl::ToChronoTime(absl::Now() + config_.read_timeout))) {
        absl::MutexLock lock(&rmu);
        ++r.failed;
        if (r.error.empty()) r.error = "no connection to the server within the read timeout";
        continue;
      }
      a.node.node_id = absl::StrCat("sim", a.index, ":", getpid(), ":", i);
      a.node.hostname = absl::StrCat("sim", a.index);
      a.node.addr = (*c)->local_addr();
      a.node.dialed_addr = (*c)->dialed_addr();
      a.node.pid = getpid();
      a.node.nproc = config_.nproc;
      a.node.master_port = 20000 + a.index % 40000;
      a.client = std::move(*c);
      // As meshrun's agent: the join answered on the event stream.
      a.client->set_join_on_stream(config_.join_on_stream);
      // The order before issue 23 (stream first, join later): for A/B runs.
      if (config_.watch_first) OpenStream(&a);
    }
  };
  std::vector<std::thread> pool;
  const int n = std::max(1, std::min(config_.connect_concurrency, config_.count));
  for (int t = 0; t < n; ++t) pool.emplace_back(connect_some);
  for (auto& t : pool) t.join();
  // Connected: the client has its channel to the server (the agent opens its
  // event stream with its first join, as meshrun's agent does).
  for (auto& a : agents_) {
    if (!a->client) continue;
    a->session_seen = true;
    ++r.ok;
    r.end = MonoNow();
    if (r.first == 0) r.first = r.end;
  }
  int pending = 0;
  r.failed += pending;
  return r;
}

void SimAgents::HeartbeatLoop(int thread_index) {
  const int threads = std::max(1, config_.heartbeat_threads);
  std::vector<Agent*> mine;
  for (size_t i = thread_index; i < agents_.size(); i += threads) {
    if (agents_[i]->client && agents_[i]->session_seen) mine.push_back(agents_[i].get());
  }
  if (mine.empty()) return;
  // As the agent's heartbeat thread: one per keep_alive_interval each, with
  // the agent's deadline; here spread evenly over the interval.
  const absl::Duration interval = config_.keep_alive_interval;
  absl::Time cycle = absl::Now();
  while (!stop_heartbeats_.load()) {
    for (size_t k = 0; k < mine.size() && !stop_heartbeats_.load(); ++k) {
      const absl::Time due = cycle + interval * (static_cast<double>(k + 1) / static_cast<double>(mine.size()));
      while (!stop_heartbeats_.load() && absl::Now() < due) {
        absl::SleepFor(std::min(absl::Milliseconds(50), due - absl::Now()));
      }
      if (stop_heartbeats_.load()) break;
      Agent& a = *mine[k];
      absl::StatusOr<int64_t> r = a.client->Heartbeat(a.node.node_id, a.round.load(), interval + absl::Seconds(2));
      absl::MutexLock lock(&mu_);
      if (r.ok()) {
        ++counters_.heartbeats_ok;
      } else {
        ++counters_.heartbeats_failed;
        if (counters_.first_heartbeat_error.empty()) counters_.first_heartbeat_error = r.status().ToString();
      }
    }
    cycle += interval;
  }
}

void SimAgents::OpenStream(Agent* a) {
  a->client->StartWatch(
      a->node.node_id, -1,
      [this](const RunEvent& e) {
        if (e.kind != RunEvent::Kind::kRoundClosed) return;
        const double t = MonoNow();
        absl::MutexLock lock(&mu_);
        if (round_closed_seen_++ == 0) round_closed_first_ = t;
        round_closed_last_ = std::max(round_closed_last_, t);
      },
      [this, a](const absl::Status& s) {
        if (leaving_.load() || s.ok()) return;
        absl::MutexLock lock(&mu_);
        ++counters_.streams_lost;
        if (phase_.error.empty()) phase_.error = absl::StrCat(a->node.node_id, ": ", s.message());
      });
}

PhaseResult SimAgents::Join() {
  int expected = 0;
  {
    absl::MutexLock lock(&mu_);
    phase_ = PhaseResult();
    phase_.start = MonoNow();
  }
  rendezvous::RunConfig rc;
  rc.min_nodes = rc.max_nodes = config_.nnodes;
  rc.keep_alive_interval = config_.keep_alive_interval;
  rc.keep_alive_max_attempt = config_.keep_alive_max_attempt;
  rc.exit_barrier_timeout = config_.exit_barrier_timeout;
  for (auto& ap : agents_) {
    if (!ap->session_seen) continue;
    ++expected;
    Agent* a = ap.get();
    a->client->JoinAsync(a->node, rc, -1, config_.join_timeout, [this, a](absl::StatusOr<Assignment> r) {
      const double t = MonoNow();
      std::string bad;
      if (!r.ok()) {
        bad = std::string(r.status().message());
      } else if (r->round != 0 || r->node_count != config_.nnodes ||
                 r->world_size != static_cast<int64_t>(config_.nnodes) * config_.nproc || r->node_rank < 0 ||
                 r->node_rank >= config_.nnodes) {
        bad = absl::StrCat("unexpected assignment: round ", r->round, " node rank ", r->node_rank, " of ",
                           r->node_count, ", world size ", r->world_size);
      }
      absl::MutexLock lock(&mu_);
      if (bad.empty()) {
        ++phase_.ok;
        phase_.rank_sum += r->node_rank;
        a->round = r->round;
        a->node_rank = static_cast<int>(r->node_rank);
      } else {
        ++phase_.failed;
        if (phase_.error.empty()) phase_.error = absl::StrCat(a->node.node_id, ": ", bad);
      }
      if (phase_.first == 0) phase_.first = t;
      phase_.end = std::max(phase_.end, t);
    });
    // The event stream right after the join, over the same connection, as
    // meshrun's agent opens it (agent/session_join.cc).
    if (!config_.watch_first) OpenStream(a);
  }
  // Heartbeats from here on, as the agent's (its first one a keep-alive
  // interval after it started).
  if (heartbeat_threads_.empty()) {
    for (int t = 0; t < std::max(1, config_.heartbeat_threads); ++t) {
      heartbeat_threads_.emplace_back([this, t] { HeartbeatLoop(t); });
    }
  }
  absl::MutexLock lock(&mu_);
  if (!AwaitLocked([&] { return phase_.ok + phase_.failed >= expected; }) && phase_.error.empty()) {
    phase_.error = absl::StrCat(expected - phase_.ok - phase_.failed, " joins unanswered within the phase timeout");
  }
  return phase_;
}

PhaseResult SimAgents::RoundClosed() {
  int expected = 0;
  for (auto& a : agents_) expected += a->session_seen ? 1 : 0;
  absl::MutexLock lock(&mu_);
  PhaseResult r;
  const bool all = AwaitLocked([&] { return round_closed_seen_ >= expected; });
  r.first = round_closed_first_;
  r.end = round_closed_last_;
  r.ok = round_closed_seen_;
  r.failed = expected - round_closed_seen_;
  if (!all) r.error = absl::StrCat(r.failed, " streams delivered no ROUND_CLOSED within the phase timeout");
  return r;
}

PhaseResult SimAgents::Failover(const std::string& old_endpoint, double since) {
  PhaseResult r;
  r.start = since;
  std::vector<Agent*> waiting;
  for (auto& a : agents_) {
    if (a->session_seen && a->client) waiting.push_back(a.get());
  }
  const absl::Time deadline = absl::Now() + config_.phase_timeout;
  while (!waiting.empty() && absl::Now() < deadline) {
    const double t = MonoNow();
    auto moved = [&](Agent* a) { return a->client->endpoint() != old_endpoint; };
    const auto rest = std::partition(waiting.begin(), waiting.end(), [&](Agent* a) { return !moved(a); });
    const int n = static_cast<int>(waiting.end() - rest);
    if (n > 0) {
      if (r.first == 0) r.first = t;
      r.end = t;
      r.ok += n;
      waiting.erase(rest, waiting.end());
    }
    if (!waiting.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  r.failed = static_cast<int>(waiting.size());
  if (r.failed > 0) {
    r.error = absl::StrCat(r.failed, " agents still on ", old_endpoint, " after the phase timeout");
  }
  return r;
}

PhaseResult SimAgents::Finish() {
  int expected = 0;
  {
    absl::MutexLock lock(&mu_);
    phase_ = PhaseResult();
    phase_.start = MonoNow();
  }
  for (auto& ap : agents_) {
    if (!ap->session_seen) continue;
    ++expected;
    Agent* a = ap.get();
    a->client->ReportFinishedAsync(a->node.node_id, a->round.load(), config_.exit_barrier_timeout,
                                   [this, a](absl::StatusOr<rendezvous::BarrierResult> r) {
                                     const double t = MonoNow();
                                     absl::MutexLock lock(&mu_);
                                     if (r.ok() && r->all_finished) {
                                       ++phase_.ok;
                                     } else {
                                       ++phase_.failed;
                                       if (phase_.error.empty()) {
                                         phase_.error = absl::StrCat(
                                             a->node.node_id, ": ",
                                             r.ok() ? absl::StrCat("barrier timed out: ", r->finished_nodes, " of ",
                                                                   r->node_count, " finished")
                                                    : std::string(r.status().message()));
                                       }
                                     }
                                     if (phase_.first == 0) phase_.first = t;
                                     phase_.end = std::max(phase_.end, t);
                                   });
  }
  absl::MutexLock lock(&mu_);
  if (!AwaitLocked([&] { return phase_.ok + phase_.failed >= expected; }) && phase_.error.empty()) {
    phase_.error = absl::StrCat(expected - phase_.ok - phase_.failed, " exit barriers unanswered within the phase timeout");
  }
  return phase_;
}

PhaseResult SimAgents::Leave() {
  PhaseResult r;
  r.start = MonoNow();
  leaving_ = true;
  stop_heartbeats_ = true;
  for (auto& t : heartbeat_threads_) t.join();
  heartbeat_threads_.clear();
  std::atomic<size_t> next{0};
  auto destroy_some = [&] {
    for (size_t i = next.fetch_add(1); i < agents_.size(); i = next.fetch_add(1)) agents_[i]->client.reset();
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < 8; ++t) pool.emplace_back(destroy_some);
  for (auto& t : pool) t.join();
  r.end = r.first = MonoNow();
  r.ok = static_cast<int>(agents_.size());
  return r;
}

PhaseResult SimAgents::PrepareWorkers() {
  std::vector<SimNode> nodes;
  {
    absl::MutexLock lock(&mu_);
    for (auto& a : agents_) {
      if (!a->client || a->node_rank < 0) continue;
      nodes.push_back(SimNode{a->client->channel(), a->node.node_id, a->node_rank, a->round.load()});
    }
  }
  workers_ = std::make_unique<WorkersPhase>(config_);
  PhaseResult r = workers_->Prepare(nodes);
  const int missing = config_.count - static_cast<int>(nodes.size());
  if (missing > 0) {
    r.failed += missing * config_.workers_per_agent;
    if (r.error.empty()) r.error = absl::StrCat(missing, " agents have no assignment");
  }
  return r;
}

PhaseResult SimAgents::Workers() {
  if (!workers_) {
    PhaseResult r;
    r.failed = config_.count * config_.workers_per_agent;
    r.error = "workers phase run before its preparation";
    return r;
  }
  PhaseResult r = workers_->Run();
  workers_.reset();
  return r;
}

SimCounters SimAgents::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

}  // namespace meshrun::bench
