#include "agent/session.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/error_file.h"
#include "agent/failure_summary.h"
#include "agent/signal_policy.h"
#include "agent/worker_env.h"
#include "agent/worker_stop.h"
#include "client/grpc_store.h"
#include "common/net.h"

namespace meshrun::agent {

// Spawns this node's workers for round `a` and supervises them. Returns the
// exit code when the agent is done, nullopt to join the next round.
std::optional<int> Session::RunRound(const Assignment& a) {
  round_ = a;
  workers_.clear();
  pump_.Clear(absl::Now() + absl::Milliseconds(200));  // The previous attempt's leftovers.
  std::filesystem::path attempt = run_dir_ / absl::StrCat("attempt_", a.round);
  std::error_code ec;
  std::filesystem::create_directories(attempt, ec);
  if (ec) return Fatal(absl::StrCat("cannot create ", attempt.string(), ": ", ec.message()));
  const std::vector<std::string> base_env = CurrentEnvironment();
  // Workers reach the store through this agent (agent/store_proxy/store_proxy.h); keys
  // of the rounds before are dropped there.
  proxy_->SetRound(a.round);
  const std::string store_endpoint = proxy_->endpoint();
  // The agent store serves this round's keys (node rank 0's is the workers'
  // MASTER_ADDR:MASTER_PORT); the connection comes up in the background.
  if (agent_store_) {
    client::GrpcStoreOptions so;
    so.endpoint = store_endpoint;
    so.run_id = o_.run_id;
    so.round = a.round;
    so.wait_for_connection = false;
    so.channel = proxy_->InProcessChannel();  // The proxy is in this process: no socket between.
    absl::StatusOr<std::shared_ptr<Store>> store = client::ConnectGrpcStore(so);
    if (!store.ok()) return Fatal(absl::StrCat("the agent store: ", store.status().message()));
    // Under "torch/": the agent store has no authentication (as PyTorch's
    // TCPStore), so its clients cannot reach libmesh's keys or any other.
    // Node rank 0's is the round's workers' store: its reads are cached
    // (tcpstore/read_cache.h: the keys are written through it only).
    agent_store_->SetStore(std::make_shared<PrefixStore>(std::string(tcpstore::kAgentStorePrefix), *store),
                           std::make_shared<PrefixStore>(std::string(tcpstore::kAgentStoreInternalPrefix), *store),
                           /*read_cache=*/a.node_rank == 0);
  }
  std::string ifname;
  if (absl::StatusOr<std::string> i = InterfaceOf(a.node_addr); i.ok()) {
    ifname = *i;
  } else if (!a.node_addr.empty()) {
    log_->warn("advertised address {}: {}; GLOO_SOCKET_IFNAME left unset", a.node_addr, std::string(i.status().message()));
  }
  std::vector<std::string> names;
  for (int signo : o_.forwarded_signals) names.push_back(SignalName(signo));
  const std::string signals_text = absl::StrJoin(names, ",");
  std::vector<Child> children;
  for (int lr = 0; lr < o_.nproc; ++lr) {
    Worker w;
    w.local_rank = lr;
    const int rank = a.rank_base + lr;
    w.error_file = (attempt / absl::StrCat("rank_", rank, ".error.json")).string();
    WorkerEnvInput in{a,           lr,     o_.nproc, o_.role, o_.run_id, store_endpoint, w.error_file,
                      ifname,      o_.permanent_failure_exit_code, o_.virtual_local_rank, signals_text,
                      agent_store_ != nullptr, lighthouse_ ? lighthouse_->address() : std::string(),
                      lighthouse_ ? LighthouseRunId() : std::string(), replica_group_, o_.replica_groups};
    absl::StatusOr<std::pair<int, int>> pipes = pump_.Add(lr, Routes(lr, rank, attempt));
    if (!pipes.ok()) {
      StopWorkers(SIGKILL, absl::ZeroDuration());
      return Fatal(absl::StrCat("worker output of local rank ", lr, ": ", pipes.status().message()));
    }
    absl::StatusOr<Child> child = Spawn(WorkerArgv(lr), BuildWorkerEnv(base_env, in), pipes->first, pipes->second,
                                            /*all_signals_blocked=*/!shim_.empty(),
                                            lr < static_cast<int>(o_.numa_bindings.size()) ? &o_.numa_bindings[lr]
                                                                                            : nullptr);
    ::close(pipes->first);
    ::close(pipes->second);
    if (!child.ok()) {
      StopWorkers(SIGKILL, absl::ZeroDuration());
      return Fatal(absl::StrCat("cannot start local rank ", lr, ": ", child.status().message()));
    }
    w.pid = child->pid;
    w.running = true;
    workers_.push_back(w);
    children.push_back(*child);
  }
  for (size_t i = 0; i < children.size(); ++i) {
    absl::Status s = CheckExec(children[i], o_.command[0]);
    if (!s.ok()) {
      StopWorkers(SIGKILL, absl::ZeroDuration());
      Fatal(absl::StrCat("cannot start local rank ", i, ": ", s.message()));
      return 127;
    }
  }
  log_->info("round {}: started {} workers (ranks {}..{})", a.round, o_.nproc, a.rank_base,
             a.rank_base + o_.nproc - 1);
  return Supervise();
}

// The worker's command line, behind the shim when it is installed next
// to meshrun (it keeps a SIGKILLed agent from leaving grandchildren).
std::vector<std::string> Session::WorkerArgv(int local_rank) const {
  std::vector<std::string> cmd = SubstituteLocalRank(o_.command, local_rank);
  if (shim_.empty()) return cmd;
  std::vector<std::string> argv = {shim_, absl::StrCat(absl::ToInt64Milliseconds(o_.shutdown_timeout)), "--"};
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  return argv;
}

int Session::Running() const {
  int n = 0;
  for (const auto& w : workers_) n += w.running ? 1 : 0;
  return n;
}

Worker* Session::FindWorker(pid_t pid) {
  for (auto& w : workers_) {
    if (w.pid == pid) return &w;
  }
  return nullptr;
}

std::optional<int> Session::Supervise() {
  for (;;) {
    std::optional<Event> ev = NextEvent(absl::InfiniteFuture());
    if (auto* c = std::get_if<ChildExit>(&*ev)) {
      Worker* w = FindWorker(c->pid);
      if (w == nullptr || !w->running) continue;
      w->running = false;
      w->status = c->status;
      if (!(WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0)) return OnWorkerFailure(*w);
      log_->debug("local rank {} (rank {}) exited 0; {} still running", w->local_rank,
                  round_.rank_base + w->local_rank, Running());
      if (Running() == 0) return Finish();
      continue;
    }
    if (auto* sig = std::get_if<SignalReceived>(&*ev)) {
      if (PassThrough(sig->signo)) {
        SignalMains(workers_, sig->signo);
        continue;
      }
      std::fprintf(stderr, "meshrun: received %s; stopping workers\n", SignalName(sig->signo).c_str());
      received_signal_ = sig->signo;
      if (o_.on_stop_signal) o_.on_stop_signal(sig->signo);
      StopWorkers(sig->signo, o_.shutdown_timeout, /*by_signal=*/true);
      return 128 + sig->signo;
    }
    if (auto* st = std::get_if<Stale>(&*ev)) {
      if (st->gen != gen_) continue;
      OnStale(st->why);
      StopWorkers(SIGTERM, o_.shutdown_timeout);
      return std::nullopt;
    }
    if (auto* se = std::get_if<ServerEvent>(&*ev)) {
      if (se->gen != gen_) continue;
      const RunEvent& e = se->event;
      if (e.kind == RunEvent::Kind::kRestart && e.round > round_.round) {
        if (e.membership_change) {
          std::fprintf(stderr, "meshrun: %s; re-forming (round %lld)\n",
                       e.root_cause ? e.root_cause->message.c_str() : "membership changed",
                       static_cast<long long>(e.round));
        } else {
          std::fprintf(stderr, "meshrun: %s; restarting workers (round %lld, restart %d of %d)\n",
                       e.root_cause ? DescribeFailure(*e.root_cause).c_str() : "restart requested",
                       static_cast<long long>(e.round), e.restart_count, o_.max_restarts);
        }
        StopWorkers(SIGTERM, o_.shutdown_timeout);
        return std::nullopt;
      }
      if (e.kind == RunEvent::Kind::kRunFailed) {
        StopWorkers(SIGTERM, o_.shutdown_timeout);
        return Summary(e.root_cause);
      }
      continue;
    }
    if (auto* rg = std::get_if<ReplicaGroupsBelowMin>(&*ev)) {
      if (rg->gen != gen_) continue;
      return FailBelowMinReplicaGroups(*rg);
    }
    if (auto* sc = std::get_if<StreamClosed>(&*ev)) {
      if (sc->gen != gen_ || sc->status.ok()) continue;
      if (IsStale(sc->status)) {
        OnStale(std::string(sc->status.message()));
        StopWorkers(SIGTERM, o_.shutdown_timeout);
        return std::nullopt;
      }
      log_->info("{}; stopping this node's workers", std::string(sc->status.message()));
      if (const int signo = StopWorkers(SIGTERM, o_.shutdown_timeout); signo != 0) {
        // Told to stop while it stopped its workers for the lost server (a
        // job stopped everywhere at once): the stop it was asked for.
        std::fprintf(stderr, "meshrun: %s; received %s meanwhile: stopped this node's workers\n",
                     std::string(sc->status.message()).c_str(), SignalName(signo).c_str());
        received_signal_ = signo;
        return 128 + signo;
      }
      return Fatal(absl::StrCat(sc->status.message(), "; stopped this node's workers"));
    }
  }
}

std::optional<int> Session::OnWorkerFailure(const Worker& w) {
  WorkerFailure f;
  f.node_id = node_.node_id;
  f.hostname = node_.hostname;
  f.node_rank = round_.node_rank;
  f.rank = round_.rank_base + w.local_rank;
  f.local_rank = w.local_rank;
  if (WIFSIGNALED(w.status)) {
    f.signal = WTERMSIG(w.status);
  } else {
    f.exit_code = WEXITSTATUS(w.status);
  }
  ErrorFileInfo error_file = ReadErrorFile(w.error_file);
  f.message = error_file.message;
  f.permanent = error_file.permanent ||
                (o_.permanent_failure_exit_code != 0 && f.signal == 0 && f.exit_code == o_.permanent_failure_exit_code);
  if (f.message.empty()) {
    // No error file: the last lines the worker wrote to stderr.
    f.message = pump_.StderrTail(w.local_rank, absl::Now() + absl::Milliseconds(300));
  }
  if (f.message.size() > 4096) f.message = "..." + f.message.substr(f.message.size() - 4096);
  f.round = round_.round;
  failed_error_file_ = std::filesystem::exists(w.error_file) ? w.error_file : "";
  return ReportAndStop(std::move(f));
}

std::optional<int> Session::ReportAndStop(WorkerFailure f) {
  // Report first, so the other nodes stop or restart while this one is
  // still stopping its own workers.
  MarkStopped();
  SignalMains(workers_, SIGTERM);
  absl::StatusOr<rendezvous::FailureVerdict> v = client_->ReportFailure(f, o_.read_timeout);
  StopWorkers(/*signo=*/0, o_.shutdown_timeout);  // SIGTERM went out above.
  if (!v.ok()) {
    log_->warn("could not report the failure: {}", v.status().ToString());
    f.time = absl::Now();
    return Summary(f);
  }
  if (v->decision == rendezvous::Decision::kRestart) {
    std::fprintf(stderr, "meshrun: %s; restart %d of %d (round %lld)\n",
                 DescribeFailure(v->root_cause).c_str(), round_.restart_count + 1, o_.max_restarts,
                 static_cast<long long>(v->next_round));
    return std::nullopt;
  }
  return Summary(v->root_cause);
}

// See agent/worker_stop.h: the signal to each main process, the grace,
// then everything left below this agent.
int Session::StopWorkers(int signo, absl::Duration grace, bool by_signal) {
  MarkStopped();
  return agent::StopWorkers(workers_, signo, grace, by_signal, q_, deferred_);
}

void Session::MarkStopped() {
  for (Worker& w : workers_) w.stopped = w.stopped || w.running;
}

}  // namespace meshrun::agent
