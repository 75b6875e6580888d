#include "agent/node_agent.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "agent/error_file.h"
#include "agent/events.h"
#include "agent/failure_summary.h"
#include "agent/output.h"
#include "agent/process.h"
#include "agent/rdzv_client.h"
#include "agent/signal_policy.h"
#include "agent/worker_stop.h"
#include "agent/worker_env.h"
#include "common/endpoint.h"
#include "common/logging.h"
#include "common/net.h"

namespace meshrun::agent {
namespace {

using rendezvous::Assignment;
using rendezvous::RunEvent;
using rendezvous::WorkerFailure;

bool IsStale(const absl::Status& s) { return absl::IsFailedPrecondition(s) && absl::StrContains(s.message(), "stale"); }

std::string RandomSuffix() {
  std::random_device rd;
  return absl::StrCat(absl::Hex(rd(), absl::kZeroPad8));
}

// meshrun-worker-shim next to the running meshrun binary, or "" (then
// workers run directly: a SIGKILLed agent can leave grandchildren behind).
std::string FindShim() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  std::filesystem::path shim = self.parent_path() / "meshrun-worker-shim";
  if (::access(shim.c_str(), X_OK) != 0) {
    Logger("agent")->warn("{} not found: workers run without it", shim.string());
    return "";
  }
  return shim.string();
}

class Session {
 public:
  explicit Session(const AgentOptions& o) : o_(o), log_(Logger("agent")) {}

  int Run() {
    node_.hostname = Hostname();
    node_.pid = ::getpid();
    node_.nproc = o_.nproc;
    node_.node_rank_hint = o_.node_rank;
    node_.is_endpoint_host = o_.is_endpoint_host;
    node_.role = o_.role;
    config_.min_nodes = o_.min_nodes;
    config_.max_nodes = o_.max_nodes;
    config_.last_call_timeout = o_.last_call_timeout;
    config_.max_restarts = o_.max_restarts;
    config_.exit_barrier_timeout = o_.exit_barrier_timeout;
    config_.keep_alive_interval = o_.keep_alive_interval;
    config_.keep_alive_max_attempt = o_.keep_alive_max_attempt;

    BecomeSubreaper();
    signals_ = std::make_unique<SignalThread>(
        o_.forwarded_signals, [this](int s) { q_.Push(SignalReceived{s}); },
        [this](pid_t p, int st) { q_.Push(ChildExit{p, st}); });
    if (absl::Status s = signals_->Start(); !s.ok()) return Fatal(s.ToString());

    absl::StatusOr<Endpoint> ep = ParseEndpoint(o_.endpoint, 29400);
    if (!ep.ok()) return Fatal(std::string(ep.status().message()));
    // The advertised address is decided by the server at each round
    // (DESIGN.md section 4b); this node only states an explicit --local_addr.
    if (!o_.local_addr.empty()) {
      absl::StatusOr<std::vector<std::string>> addrs = ResolveNumeric(o_.local_addr);
      if (!addrs.ok()) return Fatal(absl::StrCat("--local_addr=", o_.local_addr, ": ", addrs.status().message()));
      node_.addr = addrs->front();
      node_.local_addr = o_.local_addr;
    }
    endpoint_ = ep->ToString();
    shim_ = FindShim();
    if (absl::Status s = PrepareLogDir(); !s.ok()) return Fatal(std::string(s.message()));
    if (absl::Status s = NewMembership(); !s.ok()) return Fatal(std::string(s.message()));
    int code = Loop();
    EndOfJob();
    EndMembership();  // Stops the watch and heartbeat threads before the queue goes away.
    CleanLogDir(code);
    return code;
  }

  int received_signal() const { return received_signal_; }

 private:
  int Fatal(const std::string& msg) {
    std::fprintf(stderr, "meshrun: error: %s\n", msg.c_str());
    return 1;
  }

  // The run's log folder: --log_dir/<run id>_<start time>_<pid> (the pid
  // keeps nodes sharing one folder, or one host, apart), else a temporary
  // folder that holds the error files (and redirected streams).
  absl::Status PrepareLogDir() {
    std::error_code ec;
    std::filesystem::path base = o_.log_dir.empty()
                                     ? std::filesystem::temp_directory_path(ec) / absl::StrCat("meshrun-", ::getuid())
                                     : std::filesystem::path(o_.log_dir);
    run_dir_ = base / absl::StrCat(o_.run_id, "_", absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()),
                                   "_", node_.pid);
    std::filesystem::create_directories(run_dir_, ec);
    if (ec) return absl::FailedPreconditionError(absl::StrCat("cannot create ", run_dir_.string(), ": ", ec.message()));
    temp_run_dir_ = o_.log_dir.empty();
    auto redirects = ParseStd(o_.redirects, o_.nproc, "--redirects");
    if (!redirects.ok()) return redirects.status();
    auto tee = ParseStd(o_.tee, o_.nproc, "--tee");
    if (!tee.ok()) return tee.status();
    auto filter = ParseLocalRanksFilter(o_.local_ranks_filter, o_.nproc);
    if (!filter.ok()) return filter.status();
    redirects_ = *redirects;
    tee_ = *tee;
    console_ranks_ = *filter;
    bool any_file = !o_.log_dir.empty();
    for (int lr = 0; lr < o_.nproc; ++lr) any_file = any_file || redirects_[lr] != 0 || tee_[lr] != 0;
    if (any_file && o_.log_dir.empty()) {
      std::fprintf(stderr, "meshrun: worker logs go to %s\n", run_dir_.c_str());
      keep_run_dir_ = true;
    }
    return pump_.Start();
  }

  // Where worker `lr` (global rank `rank`) writes, for this attempt.
  WorkerRoutes Routes(int lr, int rank, const std::filesystem::path& attempt) const {
    WorkerRoutes r;
    if (o_.log_line_prefix_template.empty()) {
      r.prefix = absl::StrCat("[n", round_.node_rank, ":r", rank, "] ");
    } else {
      // Checked by the launcher: a bad macro never gets here.
      r.prefix = ExpandLogLinePrefix(o_.log_line_prefix_template, o_.role, rank, lr).value_or("");
    }
    const bool all_files = !o_.log_dir.empty();
    auto route = [&](int bit) {
      StreamRoute s;
      const bool redirected = (redirects_[lr] & bit) != 0;
      const bool teed = (tee_[lr] & bit) != 0;
      s.console = console_ranks_[lr] && !redirected;
      if (all_files || redirected || teed) {
        s.file = (attempt / absl::StrCat("rank_", rank, bit == 1 ? ".stdout" : ".stderr")).string();
      }
      return s;
    };
    r.out = route(1);
    r.err = route(2);
    r.out.duplicate_filters = o_.duplicate_stdout_filters;
    r.out.duplicate_file = (attempt / "filtered_stdout.log").string();
    r.err.duplicate_filters = o_.duplicate_stderr_filters;
    r.err.duplicate_file = (attempt / "filtered_stderr.log").string();
    return r;
  }

  // Connects as a new member (a fresh node id), opens the event stream
  // before the first join (so join progress, a failure elsewhere and the
  // loss of the server reach this node at once) and starts heartbeats.
  absl::Status NewMembership() {
    EndMembership();
    ++gen_;
    node_.node_id = absl::StrCat(node_.hostname, ":", node_.pid, ":", RandomSuffix());
    auto client = RendezvousClient::Connect(endpoint_, o_.run_id, o_.token, o_.read_timeout, o_.tls);
    if (!client.ok() && !o_.endpoint_note.empty()) {
      return absl::Status(client.status().code(), absl::StrCat(client.status().message(), " (", o_.endpoint_note, ")"));
    }
    if (!client.ok()) return client.status();
    client_ = std::move(*client);
    node_.dialed_addr = client_->dialed_addr();
    if (o_.local_addr.empty()) node_.addr = client_->local_addr();
    const int gen = gen_;
    client_->StartWatch(
        node_.node_id, -1, [this, gen](const RunEvent& e) { q_.Push(ServerEvent{e, gen}); },
        [this, gen](const absl::Status& s) { q_.Push(StreamClosed{s, gen}); });
    hb_stop_ = std::make_shared<absl::Notification>();
    hb_thread_ = std::thread([this, gen, stop = hb_stop_, client = client_.get(), id = node_.node_id] {
      while (!stop->WaitForNotificationWithTimeout(o_.keep_alive_interval)) {
        absl::StatusOr<int64_t> r = client->Heartbeat(id, hb_round_.load(), o_.keep_alive_interval + absl::Seconds(2));
        if (IsStale(r.status())) {
          q_.Push(Stale{std::string(r.status().message()), gen});
          return;
        }
      }
    });
    return absl::OkStatus();
  }

  void EndMembership() {
    if (hb_stop_) hb_stop_->Notify();
    if (hb_thread_.joinable()) hb_thread_.join();
    client_.reset();
  }

  void CleanLogDir(int code) {
    if (!temp_run_dir_ || keep_run_dir_ || code != 0) return;
    std::error_code ec;
    std::filesystem::remove_all(run_dir_, ec);
  }

  // The whole job: join, run, and on failure restart through the server.
  int Loop() {
    int64_t last_round = -1;
    for (int attempt = 0;; ++attempt) {
      if (stale_) {
        // Declared lost while silent: this node's round is gone; its workers
        // were stopped. Rejoin as a new member.
        stale_ = false;
        last_round = -1;
        if (absl::Status s = NewMembership(); !s.ok()) return Fatal(std::string(s.message()));
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
  bool OnStale(const std::string& why) {
    std::fprintf(stderr, "meshrun: this node was declared lost (%s); stopping its workers and rejoining\n",
                 why.c_str());
    stale_ = true;
    return true;
  }

  // Joins the next round; false with `*exit_code` set when the agent must stop.
  bool Join(int64_t last_round, Assignment* out, std::optional<int>* exit_code) {
    absl::StatusOr<int> port = FindFreePort(node_.addr);
    node_.master_port = port.ok() ? *port : 0;
    const absl::Time join_deadline = absl::Now() + o_.join_timeout;
    joined_peak_ = 0;
    client_->JoinAsync(node_, config_, last_round, o_.join_timeout,
                       [this](absl::StatusOr<Assignment> r) { q_.Push(JoinDone{std::move(r)}); });
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
                                          s.message()));
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
            std::fprintf(stderr, "meshrun: %d/%s nodes joined run '%s', waiting up to %.0f s\n", e.joined,
                         NnodesText().c_str(), o_.run_id.c_str(), absl::ToDoubleSeconds(left));
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
        *exit_code = Fatal(std::string(sc->status.message()));
        return false;
      }
      // Child exits of a previous attempt were handled already; ignore.
    }
  }

  std::string NnodesText() const {
    return o_.min_nodes == o_.max_nodes ? absl::StrCat(o_.max_nodes)
                                        : absl::StrCat(o_.min_nodes, ":", o_.max_nodes);
  }

  // Spawns this node's workers for round `a` and supervises them. Returns the
  // exit code when the agent is done, nullopt to join the next round.
  std::optional<int> RunRound(const Assignment& a) {
    round_ = a;
    workers_.clear();
    pump_.Clear(absl::Now() + absl::Milliseconds(200));  // The previous attempt's leftovers.
    std::filesystem::path attempt = run_dir_ / absl::StrCat("attempt_", a.round);
    std::error_code ec;
    std::filesystem::create_directories(attempt, ec);
    if (ec) return Fatal(absl::StrCat("cannot create ", attempt.string(), ": ", ec.message()));
    const std::vector<std::string> base_env = CurrentEnvironment();
    const std::string store_endpoint = o_.endpoint;
    std::string ifname;
    if (absl::StatusOr<std::string> i = InterfaceOf(a.node_addr); i.ok()) {
      ifname = *i;
    } else if (!a.node_addr.empty()) {
      log_->warn("advertised address {}: {}; GLOO_SOCKET_IFNAME left unset", a.node_addr, std::string(i.status().message()));
    }
    std::vector<Child> children;
    for (int lr = 0; lr < o_.nproc; ++lr) {
      Worker w;
      w.local_rank = lr;
      const int rank = a.rank_base + lr;
      w.error_file = (attempt / absl::StrCat("rank_", rank, ".error.json")).string();
      WorkerEnvInput in{a, lr, o_.nproc, o_.role, o_.run_id, store_endpoint, o_.token, w.error_file, ifname,
                        o_.permanent_failure_exit_code, o_.virtual_local_rank, o_.token_file, o_.tls.files};
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
  std::vector<std::string> WorkerArgv(int local_rank) const {
    std::vector<std::string> cmd = SubstituteLocalRank(o_.command, local_rank);
    if (shim_.empty()) return cmd;
    std::vector<std::string> argv = {shim_, absl::StrCat(absl::ToInt64Milliseconds(o_.shutdown_timeout)), "--"};
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    return argv;
  }

  int Running() const {
    int n = 0;
    for (const auto& w : workers_) n += w.running ? 1 : 0;
    return n;
  }

  Worker* FindWorker(pid_t pid) {
    for (auto& w : workers_) {
      if (w.pid == pid) return &w;
    }
    return nullptr;
  }

  std::optional<int> Supervise() {
    for (;;) {
      std::optional<Event> ev = NextEvent(absl::InfiniteFuture());
      if (auto* c = std::get_if<ChildExit>(&*ev)) {
        Worker* w = FindWorker(c->pid);
        if (w == nullptr || !w->running) continue;
        w->running = false;
        w->status = c->status;
        if (!(WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0)) return OnWorkerFailure(*w);
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
        StopWorkers(sig->signo, o_.shutdown_timeout);
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
      if (auto* sc = std::get_if<StreamClosed>(&*ev)) {
        if (sc->gen != gen_ || sc->status.ok()) continue;
        if (IsStale(sc->status)) {
          OnStale(std::string(sc->status.message()));
          StopWorkers(SIGTERM, o_.shutdown_timeout);
          return std::nullopt;
        }
        StopWorkers(SIGTERM, o_.shutdown_timeout);
        return Fatal(absl::StrCat(sc->status.message(), "; stopped this node's workers"));
      }
    }
  }

  std::optional<Event> NextEvent(absl::Time deadline) {
    if (!deferred_.empty()) {
      Event e = std::move(deferred_.front());
      deferred_.pop_front();
      return e;
    }
    return q_.Pop(deadline);
  }

  std::optional<int> OnWorkerFailure(const Worker& w) {
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
    // Report first, so the other nodes stop or restart while this one is
    // still stopping its own workers.
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

  // Prints the failure summary and returns the root cause's exit code.
  // Prints the failure summary (failure_summary.h) and returns the root
  // cause's exit code (1 when unknown).
  int Summary(const std::optional<WorkerFailure>& root) {
    SummaryContext c{o_.run_id,           round_.round,        node_.hostname,  node_.node_id, failed_error_file_,
                     round_.restart_count, o_.max_restarts, o_.permanent_failure_exit_code};
    std::fputs(FormatFailureSummary(root, c).c_str(), stderr);
    return root ? ExitCodeOfFailure(*root) : 1;
  }

  // See agent/worker_stop.h: the signal to each main process, the grace,
  // then everything left below this agent.
  void StopWorkers(int signo, absl::Duration grace) {
    agent::StopWorkers(workers_, signo, grace, q_, deferred_);
  }

  // The job is over: what the workers left behind (reparented to this
  // agent, a subreaper) is stopped, unless --keep_orphans.
  void EndOfJob() {
    const int n = StopLeftovers(o_.shutdown_timeout, o_.keep_orphans);
    if (n == 0) return;
    if (o_.keep_orphans) {
      std::fprintf(stderr, "meshrun: left %d process%s started by the workers running (--keep_orphans)\n", n,
                   n == 1 ? "" : "es");
    } else {
      std::fprintf(stderr, "meshrun: stopped %d process%s left behind by the workers (--keep_orphans keeps them)\n",
                   n, n == 1 ? "" : "es");
    }
  }

  // All of this node's workers exited 0: the exit barrier.
  std::optional<int> Finish() {
    client_->ReportFinishedAsync(node_.node_id, round_.round, o_.exit_barrier_timeout,
                                 [this](absl::StatusOr<rendezvous::BarrierResult> r) {
                                   q_.Push(BarrierDone{std::move(r)});
                                 });
    for (;;) {
      std::optional<Event> ev = NextEvent(absl::InfiniteFuture());
      if (auto* b = std::get_if<BarrierDone>(&*ev)) {
        if (!b->result.ok()) {
          log_->warn("exit barrier: {}", b->result.status().ToString());
        } else if (!b->result->all_finished) {
          std::fprintf(stderr, "meshrun: warning: exit barrier timed out after %s: %d of %d nodes finished\n",
                       absl::FormatDuration(o_.exit_barrier_timeout).c_str(), b->result->finished_nodes,
                       b->result->node_count);
        }
        return 0;
      }
      if (auto* se = std::get_if<ServerEvent>(&*ev)) {
        if (se->gen == gen_ && se->event.kind == RunEvent::Kind::kRunFailed) return Summary(se->event.root_cause);
        continue;
      }
      if (auto* sig = std::get_if<SignalReceived>(&*ev)) {
        received_signal_ = sig->signo;
        if (o_.on_stop_signal) o_.on_stop_signal(sig->signo);
        return 128 + sig->signo;
      }
      if (auto* sc = std::get_if<StreamClosed>(&*ev)) {
        if (sc->gen == gen_ && !sc->status.ok()) return Fatal(std::string(sc->status.message()));
      }
    }
  }

  const AgentOptions& o_;
  std::shared_ptr<spdlog::logger> log_;
  EventQueue q_;
  std::deque<Event> deferred_;
  std::unique_ptr<SignalThread> signals_;
  std::unique_ptr<RendezvousClient> client_;  // Declared before the heartbeat thread that uses it.
  rendezvous::NodeDesc node_;
  rendezvous::RunConfig config_;
  Assignment round_;
  std::vector<Worker> workers_;
  int joined_seen_ = 0;
  // The most nodes seen joined in this join: what a timeout reports, so
  // that nodes timing out one after the other report the same count.
  int joined_peak_ = 0;
  std::string endpoint_;
  std::string shim_;
  int gen_ = 0;            // Membership generation (new node id after a stale rejoin).
  bool stale_ = false;
  std::atomic<int64_t> hb_round_{-1};
  std::shared_ptr<absl::Notification> hb_stop_;
  std::thread hb_thread_;
  int received_signal_ = 0;
  std::filesystem::path run_dir_;
  bool temp_run_dir_ = true;
  bool keep_run_dir_ = false;
  std::vector<int> redirects_, tee_;
  std::vector<bool> console_ranks_;
  OutputPump pump_;
  std::string failed_error_file_;
};

}  // namespace

NodeAgent::NodeAgent(AgentOptions options) : options_(std::move(options)) {}

int NodeAgent::Run() {
  Session session(options_);
  int code = session.Run();
  received_signal_ = session.received_signal();
  return code;
}

}  // namespace meshrun::agent
