#include "rendezvous/server.h"

#include "common/endpoint.h"

#include <algorithm>
#include <vector>

#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_log.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/net.h"
#include "common/open_files.h"
#include "rendezvous/grpc/admin_service.h"
#include "rendezvous/grpc/call_interceptor.h"
#include "rendezvous/grpc/health_service.h"
#include "rendezvous/grpc/rendezvous_service.h"
#include "rendezvous/grpc/lighthouse_service.h"
#include "rendezvous/grpc/service_core.h"
#include "rendezvous/grpc/store_service.h"
#include "rendezvous/policy/memory_budget.h"
#include "rendezvous/server/listen_socket.h"
#include "rendezvous/server/listener_watch.h"
#include "rendezvous/policy/memory_release.h"
#include "rendezvous/server/metrics_exposer.h"

namespace meshrun::rendezvous {
namespace {

// gRPC's listener stops after an accept fails for want of descriptors
// (grpc/grpc#20418): the server's listener watch takes it from here, and
// warns once per episode in its own words.
void WatchAcceptFailures(const char* file, const char* message) {
  if (absl::StrContains(file, "tcp_server")) ListenerWatch::NoteAcceptFailure(message);
}

// The traffic counters' bounds from the server's limits.
TrafficOptions TrafficOptionsFor(const ServerLimits& limits) {
  TrafficOptions t;
  t.max_peers = limits.max_counted_peers;
  t.max_nodes = limits.max_counted_nodes;
  t.forget_after = limits.connection_idle_timeout;
  t.max_node_bytes = limits.max_node_id_bytes;
  return t;
}

}  // namespace

std::string MetricsHost(const ServerOptions& options) {
  if (!options.metrics_host.empty()) return options.metrics_host;
  // The metrics name every run: with a token they need it (a bearer token);
  // without one they stay on this host unless asked.
  return options.token.empty() ? "127.0.0.1" : options.host;
}

absl::Status CheckMetricsExposure(const ServerOptions& options) {
  const std::string h = MetricsHost(options);
  if (!options.tls.server_tls() || !options.token.empty() || IsLoopbackName(h)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "metrics host ", h, ": this server speaks TLS and has no token, and its metrics port (plain HTTP; it names "
      "every run) cannot require one: give the server a token (MESHRUN_TOKEN or --token_file; scrapes then send it "
      "as a bearer token), or keep the metrics on loopback (leave out --metrics_host)"));
}

std::string ExposureWarning(const ServerOptions& options) {
  if (!options.token.empty() || options.tls.server_tls() || IsLoopbackName(options.host)) return "";
  return absl::StrCat("the rendezvous server listens on ", options.host,
                      " without a token or TLS: anyone who reaches its port can join runs, report failures, "
                      "and read and write the store; set MESHRUN_TOKEN (or a token file: MESHRUN_TOKEN_FILE, "
                      "token_file) and/or TLS (MESHRUN_TLS_CERT, MESHRUN_TLS_KEY, MESHRUN_TLS_CA)");
}

struct RendezvousServer::Impl {
  // One grpc::Server: the newest listens; older ones (whose listener
  // stopped and was replaced) serve the connections they had.
  struct Generation {
    std::unique_ptr<grpc::Server> server;
    // Calls open on it (kept by the call interceptor, call_interceptor.h).
    std::shared_ptr<std::atomic<int64_t>> open_calls = std::make_shared<std::atomic<int64_t>>(0);
    int idle_checks = 0;
  };

  ServerOptions options;
  std::string addr;  // host:port as bound.
  DeadlineTimer timer;
  // The runs' saves that nothing answered waits on (exit-barrier arrivals):
  // etcd's round trips on a thread of their own, never on `timer`'s, whose
  // deadlines (liveness, last calls, parked reads) must not wait for etcd.
  DeadlineTimer save_timer;
  // Before everything that charges it (the registry's runs give their
  // charges back when destroyed), and the releaser its hook calls.
  std::unique_ptr<MemoryBudget> budget;
  std::unique_ptr<MemoryReleaser> releaser;  // Gives free heap back after bursts.
  // Before the registry: its removal hook (ForgetRun) may run until the
  // registry is destroyed.
  std::unique_ptr<TrafficCounters> traffic;  // Connections accepted, store requests per node.
  std::unique_ptr<RunRegistry> registry;
  std::shared_ptr<ServerMetrics> metrics = std::make_shared<ServerMetrics>();
  // The three gRPC services (membership, store, admin) and their shared door.
  std::unique_ptr<ServiceCore> core;
  std::unique_ptr<RendezvousService> rendezvous;
  std::unique_ptr<StoreService> store;
  std::unique_ptr<AdminService> admin;
  std::unique_ptr<HealthService> health;  // grpc.health.v1 on the same port.
  // torchft's lighthouses, one per run; after `core` (their answers count
  // calls there): destroyed first, which answers the calls still waiting.
  std::unique_ptr<lighthouse::LighthouseRegistry> lighthouses;
  std::unique_ptr<LighthouseService> lighthouse;
  std::unique_ptr<MetricsEndpoint> exposer;  // GET /metrics, when metrics_port >= 0.
  absl::Mutex mu;
  std::vector<Generation> generations ABSL_GUARDED_BY(mu);
  std::unique_ptr<ListenerWatch> watch;  // After `exposer`, its observer: destroyed before it.
  int port = 0;
  bool shut_down = false;

  // Builds and starts a server for the service on options.host and
  // `port_to_bind` (0: the OS picks); the bound port goes to *bound (0 when
  // binding failed). ALREADY_EXISTS when it could not bind.
  absl::StatusOr<Generation> Build(int port_to_bind, int* bound);
  // "http(s)://HOST:PORT/metrics"; "" when metrics are off.
  std::string metrics_url() const {
    if (!exposer) return "";
    const std::string h = MetricsHost(options);
    const bool any = h.empty() || h == "::" || h == "0.0.0.0";
    return absl::StrCat("http://", HostPort(any ? Hostname() : h, exposer->port()), "/metrics");
  }
  // Replaces the stopped listener (ListenerWatch's rebuild).
  absl::Status RebuildListener();
  // Takes generations out past max_server_generations (the newest stays):
  // idle older ones first, then the oldest.
  std::vector<Generation> TakeOverLimitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Shuts down older generations once no call has been open on them for
  // two checks: their clients reconnect (to the newest) at their next call.
  void RetireIdle();
};

absl::StatusOr<RendezvousServer::Impl::Generation> RendezvousServer::Impl::Build(int port_to_bind, int* bound) {
  const std::string where = HostPort(options.host, port_to_bind);
  Generation g;
  grpc::ServerBuilder builder;
  // One server per port: a second agent on this host must fail to bind and
  // become a client (docs/design.md §1.2).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Calls open at once per connection (HTTP/2 SETTINGS): a client's further
  // calls wait on its side, not in the server's memory.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(std::min<int64_t>(options.limits.max_streams_per_connection, INT32_MAX)));
  // Agents ping every few seconds (HTTP/2 keepalive) to notice a lost server.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Connections that make no call (or never finish their handshake) are
  // closed; clients reconnect by themselves (limits.h).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(std::min<int64_t>(INT32_MAX, absl::ToInt64Milliseconds(
                                                                                options.limits.connection_idle_timeout))));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(std::min<int64_t>(INT32_MAX, absl::ToInt64Milliseconds(
                                                                                options.limits.handshake_timeout))));
  // No channelz bookkeeping: a node per connection and counters on every
  // message, for 10,000 agents on one server (bench/rdzv_scale); nothing
  // here serves channelz.
  builder.AddChannelArgument(GRPC_ARG_ENABLE_CHANNELZ, 0);
  // Clients may not index headers in the server's HPACK table: each
  // connection's table otherwise keeps its own copy of every agent's
  // headers (path, user agent, ...); the price is ~100 bytes per request.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_HPACK_TABLE_SIZE_DECODER, 0);
  builder.AddListeningPort(where, ServerCredentials(options.tls), bound);
  builder.RegisterService(rendezvous.get());
  builder.RegisterService(store.get());
  builder.RegisterService(admin.get());
  builder.RegisterService(lighthouse.get());
  builder.RegisterService(health.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  // One interceptor per call feeds the RPC metrics, the traffic counters
  // and this generation's count of open calls (call_interceptor.h).
  interceptors.push_back(std::make_unique<CallInterceptorFactory>(metrics.get(), traffic.get(), g.open_calls));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  g.server = builder.BuildAndStart();
  if (!g.server || *bound == 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("cannot bind the rendezvous server to ", where, " (address in use or not local)"));
  }
  return g;
}

absl::Status RendezvousServer::Impl::RebuildListener() {
  // A gRPC server that fails to start is best avoided (see Start): only
  // with descriptors to spare.
  if (const int64_t free = FreeDescriptors(ListenerHealth::kHeadroom); free < ListenerHealth::kHeadroom) {
    return absl::ResourceExhaustedError(absl::StrCat("only ", free, " file descriptors free"));
  }
  // The stopped listener still holds the port, and its queue fills with
  // connections nobody accepts: stop it (they are reset, and retry).
  for (int fd : ListeningSockets(port)) StopListening(fd);
  // Someone else may have taken the port meanwhile.
  if (PortInUse(options.host, port)) {
    return absl::AlreadyExistsError(absl::StrCat("port ", port, " is in use by another socket"));
  }
  int bound = 0;
  absl::StatusOr<Generation> g = Build(port, &bound);
  if (!g.ok()) return g.status();
  std::vector<Generation> over;
  size_t held = 0;
  {
    absl::MutexLock lock(&mu);
    generations.push_back(std::move(*g));
    held = generations.size();
    Logger("rdzv")->debug("listener on port {} rebuilt: {} server generation(s)", port, held);
    over = TakeOverLimitLocked();
  }
  for (Generation& old : over) {
    const int64_t open = old.open_calls->load();
    if (open > 0) {
      Logger("rdzv")->warn(
          "the rendezvous server on port {} rebuilt its listener once more and held {} gRPC servers, older ones "
          "still serving calls (max_server_generations={}): the oldest, with {} call(s) open, is shut down and its "
          "clients reconnect; raise the open files limit (docs/user-guide.md, Open files)",
          port, held, options.limits.max_server_generations, open);
    }
    old.server->Shutdown(absl::ToChronoTime(absl::Now() + (open > 0 ? absl::Seconds(1) : absl::ZeroDuration())));
    old.server->Wait();
  }
  return absl::OkStatus();
}

std::vector<RendezvousServer::Impl::Generation> RendezvousServer::Impl::TakeOverLimitLocked() {
  const size_t max = static_cast<size_t>(std::max<int64_t>(1, options.limits.max_server_generations));
  std::vector<Generation> over;
  auto take = [&](size_t i) {
    over.push_back(std::move(generations[i]));
    generations.erase(generations.begin() + static_cast<std::ptrdiff_t>(i));
  };
  // Older generations with no call open go first (RetireIdle would soon),
  // then the oldest; never the newest.
  for (size_t i = 0; generations.size() > max && i + 1 < generations.size();) {
    if (generations[i].open_calls->load() == 0) {
      take(i);
    } else {
      ++i;
    }
  }
  while (generations.size() > max) take(0);
  return over;
}

void RendezvousServer::Impl::RetireIdle() {
  std::vector<std::unique_ptr<grpc::Server>> retired;
  {
    absl::MutexLock lock(&mu);
    for (size_t i = 0; i + 1 < generations.size();) {
      Generation& g = generations[i];
      g.idle_checks = g.open_calls->load() == 0 ? g.idle_checks + 1 : 0;
      if (g.idle_checks >= 2) {
        retired.push_back(std::move(g.server));
        generations.erase(generations.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }
  for (auto& server : retired) {
    // GOAWAY: a client's next call reconnects; a call that slipped in since
    // the count gets the grace period.
    server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    server->Wait();
    Logger("rdzv")->debug("an older server generation on port {} had no call open: shut down", port);
  }
}

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RendezvousServer::~RendezvousServer() { Shutdown(absl::Seconds(1)); }

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(const ServerOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", options.port, " is outside 0..65535"));
  }
  RouteGrpcLogs(&WatchAcceptFailures);
  // A port that is already listening is refused before gRPC tries to bind:
  // a failed gRPC server start leaves gRPC's state such that the process can
  // abort at exit.
  if (options.port != 0 && PortInUse(options.host, options.port)) {
    return absl::AlreadyExistsError(absl::StrCat("cannot bind the rendezvous server to ", options.host, ":",
                                                 options.port, ": address in use"));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.metrics) impl->metrics = options.metrics;
  impl->releaser = std::make_unique<MemoryReleaser>(&impl->timer, options.limits.memory_release_delay);
  {
    const int64_t budget =
        options.limits.max_server_memory > 0 ? options.limits.max_server_memory : DefaultServerMemory();
    impl->budget = std::make_unique<MemoryBudget>(budget, budget / 8);
    // Objects going in bulk (a flood's streams cancelled, a run's store
    // dropped): the freed heap goes back to the system soon after.
    impl->budget->SetReleaseHook([releaser = impl->releaser.get()] { releaser->Request(); });
    Logger("rdzv")->debug("memory budget: {}", impl->budget->Describe());
  }
  impl->registry = std::make_unique<RunRegistry>(&impl->timer, options.limits, nullptr, impl->budget.get());
  impl->registry->SetJournal(options.journal, options.on_durability_lost, &impl->save_timer);
  impl->registry->SetGate(options.gate);
  impl->traffic = std::make_unique<TrafficCounters>(TrafficOptionsFor(options.limits));
  impl->registry->SetOnRemoved([traffic = impl->traffic.get()](const std::string& id) { traffic->ForgetRun(id); });
  impl->core = std::make_unique<ServiceCore>(impl->registry.get(), options.token, impl->metrics.get(), options.limits,
                                             impl->traffic.get());
  impl->rendezvous = std::make_unique<RendezvousService>(impl->core.get());
  impl->store = std::make_unique<StoreService>(impl->core.get());
  impl->admin = std::make_unique<AdminService>(impl->core.get());
  {
    lighthouse::RegistryOptions lo;
    lo.max_lighthouses = options.limits.max_runs;
    lo.max_replica_groups = options.limits.max_replica_groups;
    lo.max_quorum_bytes = options.limits.max_quorum_bytes;
    lo.run_exists = [registry = impl->registry.get()](const std::string& id) { return registry->Find(id) != nullptr; };
    impl->lighthouses = std::make_unique<lighthouse::LighthouseRegistry>(std::move(lo));
  }
  impl->lighthouse = std::make_unique<LighthouseService>(impl->core.get(), impl->lighthouses.get());
  impl->core->set_lighthouses(impl->lighthouses.get());
  if (options.open_files_warning) {
    if (absl::StatusOr<OpenFilesLimit> l = CurrentOpenFilesLimit(); l.ok()) impl->core->set_open_files_limit(*l);
  }
  impl->core->set_memory_releaser(impl->releaser.get());
  impl->core->set_memory_budget(impl->budget.get());
  impl->core->set_gate(options.gate);

  const std::string& host = options.host;
  // gRPC's standard health service (grpc.health.v1.Health) on the same
  // port: Check outside the token, Watch with it (health_service.h). ""
  // (the whole server) and meshrun.v1.Admin answer SERVING while the server
  // runs; meshrun.v1.Rendezvous and meshrun.v1.Store too, but NOT_SERVING
  // while a replica's gate is closed (standing by, or paused); all
  // NOT_SERVING once it shuts down.
  impl->health = std::make_unique<HealthService>(options.token, options.limits.max_health_watchers,
                                                 impl->budget.get(), options.limits.connection_idle_timeout);
  impl->health->SetServing("", true);
  if (options.gate != nullptr) impl->health->FollowGate(options.gate);
  impl->health->SetServerServing(true);
  absl::StatusOr<Impl::Generation> first = impl->Build(options.port, &impl->port);
  if (!first.ok()) return first.status();
  impl->addr = HostPort(host, impl->port);
  {
    absl::MutexLock lock(&impl->mu);
    impl->generations.push_back(std::move(*first));
  }
  impl->core->set_port(impl->port);
  if (options.metrics_port >= 0) {
    if (absl::Status m = CheckMetricsExposure(options); !m.ok()) {
      absl::MutexLock lock(&impl->mu);
      impl->generations.back().server->Shutdown(absl::ToChronoTime(absl::Now()));
      impl->generations.back().server->Wait();
      return m;
    }
    Impl* raw = impl.get();
    ServerMetrics::Source source{[raw] { return raw->registry->Status(); },
                                 [raw] { return raw->core->open_watchers(); },
                                 [raw] { return raw->traffic->Snapshot(); },
                                 {},
                                 {},
                                 {}};
    if (const state::ServingGate* gate = options.gate) {
      source.replica_leader = [gate] { return gate->serving() ? 1 : 0; };
      source.replica_leads = [gate] { return gate->leads(); };
      source.replica_leading_since = [gate] { return gate->leading_since(); };
    }
    raw->metrics->SetSource(std::move(source));
    MetricsEndpoint::Options mo;
    mo.host = MetricsHost(options);
    mo.port = options.metrics_port;
    mo.request_timeout = options.limits.metrics_request_timeout;
    mo.token = options.token;
    auto exposer = MetricsEndpoint::Start(mo, impl->metrics);
    if (!exposer.ok()) {
      absl::MutexLock lock(&impl->mu);
      impl->generations.back().server->Shutdown(absl::ToChronoTime(absl::Now()));
      impl->generations.back().server->Wait();
      return exposer.status();
    }
    impl->exposer = std::move(*exposer);
    Logger("rdzv")->info("metrics on {}", impl->metrics_url());
  }
  Impl* raw = impl.get();
  ListenerWatch::Options watch;
  watch.port = impl->port;
  watch.interval = options.limits.listener_check_interval;
  watch.rebuild = [raw] { return raw->RebuildListener(); };
  watch.after_check = [raw] { raw->RetireIdle(); };
  watch.accepted = [raw] { return raw->traffic->connections_remembered(); };
  // The metrics port stops while descriptors are exhausted (the watch
  // detects it for both).
  if (impl->exposer) watch.observers.push_back(impl->exposer.get());
  impl->watch = std::make_unique<ListenerWatch>(std::move(watch));
  Logger("rdzv")->debug("heap allocator: {}", RunsOnJemalloc() ? "jemalloc" : "glibc malloc");
  Logger("rdzv")->info("rendezvous server listening on {} (port {}{})", impl->addr, impl->port,
                       options.tls.mutual() ? ", mutual TLS" : options.tls.server_tls() ? ", TLS" : ", plain");
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(impl)));
}

void RendezvousServer::Shutdown(absl::Duration grace, const std::string& why) {
  if (!impl_ || impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->watch.reset();  // No rebuild or retirement from here on.
  absl::MutexLock lock(&impl_->mu);
  impl_->health->SetAllNotServing();  // Probes see NOT_SERVING during the grace period.
  impl_->exposer.reset();
  // Parked calls (joins, store waits, barriers) and health Watch streams are
  // ended first, so the graceful phase does not wait on them.
  if (impl_->options.journal != nullptr) {
    impl_->registry->Clear(why);  // A replica: the runs go on on the next leader (UNAVAILABLE).
  } else {
    impl_->registry->CloseAll(why);
  }
  impl_->health->EndWatches(why);
  impl_->lighthouses->CloseAll(absl::UnavailableError(why));
  const auto deadline = absl::ToChronoTime(absl::Now() + grace);
  for (Impl::Generation& g : impl_->generations) g.server->Shutdown(deadline);
  for (Impl::Generation& g : impl_->generations) g.server->Wait();
}

bool RendezvousServer::WaitForAgents(absl::Duration timeout) {
  return impl_->core->WaitForNoWatchers(timeout);
}

void RendezvousServer::RestoreState(const std::vector<state::RunRecord>& records, const std::string& why,
                                    const TimelineEvent& takeover) {
  impl_->registry->Restore(records, why, takeover);
}

void RendezvousServer::ClearState(const std::string& why) {
  impl_->registry->Clear(why);
  // A replica that stopped leading: the next leader's lighthouses answer.
  impl_->lighthouses->CloseAll(absl::UnavailableError(why));
}

void RendezvousServer::RaiseQuorumIdFloor(int64_t floor) { impl_->lighthouses->RaiseQuorumIdFloor(floor); }

int RendezvousServer::port() const { return impl_->port; }

int RendezvousServer::metrics_port() const { return impl_->exposer ? impl_->exposer->port() : -1; }

std::string RendezvousServer::metrics_url() const { return impl_->metrics_url(); }

std::string RendezvousServer::endpoint() const {
  std::string host = impl_->options.host;
  if (host == "0.0.0.0" || host.empty()) host = "127.0.0.1";
  if (host == "::") host = "::1";
  return HostPort(host, impl_->port);
}

}  // namespace meshrun::rendezvous
