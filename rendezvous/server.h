// The rendezvous server: gRPC callback service over the run registry.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "rendezvous/policy/limits.h"
#include "rendezvous/state/serving_gate.h"
#include "rendezvous/state/state.h"

namespace grpc {
class Channel;
}

namespace meshrun::rendezvous {

class ServerMetrics;

struct ServerOptions {
  // Address to bind: "0.0.0.0" (all IPv4), "::" (all), "127.0.0.1"
  // (loopback only, as --standalone uses), or any numeric address.
  std::string host = "0.0.0.0";
  // TCP port; 0 lets the OS pick one (read it back with port()).
  int port = 0;
  // When non-empty, every request must carry this token (MESHRUN_TOKEN).
  std::string token;
  // Bounds on everything a client may ask for (limits.h).
  ServerLimits limits;
  // Prometheus metrics (metrics.h) at GET /metrics on this port: -1 none,
  // 0 the OS picks (read it back with metrics_port()). The address is
  // `metrics_host`; when empty, `host` for a server with a token (a scrape
  // then needs it as an HTTP bearer token: metrics_exposer.h), else
  // 127.0.0.1 (its metrics, which name every run, stay on this host). A
  // TLS server without a token may not put them elsewhere (Start refuses
  // it: CheckMetricsExposure).
  int metrics_port = -1;
  std::string metrics_host;
  // TLS: served when tls.server_tls(); client certificates signed by
  // tls.ca_pem required when tls.mutual(). Plain gRPC otherwise.
  TlsMaterial tls;
  // Warn (once per larger value) at a join whose --nnodes MAX needs more
  // file descriptors than the open files limit allows (one per agent
  // connection, plus margin). The launcher turns it off: it warns itself.
  bool open_files_warning = true;
  // A replica of a replicated server (meshrun server --state; docs/design.md
  // section 4d): `journal` receives every run's durable state, and `gate`
  // says whether this replica serves (closed: calls are answered with who
  // leads). Both must outlive the server. nullptr (the default): a single
  // server with its state in memory only, always serving.
  state::RunJournal* journal = nullptr;
  const state::ServingGate* gate = nullptr;
  // Called (any thread, no lock of the server held) when a save to
  // `journal` failed or its outcome is unknown: the runs in memory may be
  // ahead of the journal, and their callers were answered UNAVAILABLE. A
  // replica closes its gate and reloads its state (Replica::Reload).
  std::function<void(const absl::Status&)> on_durability_lost;
  // The metrics the server records into and serves; null (the default):
  // its own. A replica passes the ones its etcd calls are recorded in.
  std::shared_ptr<ServerMetrics> metrics;
};

// The service name the standard health service reports for the rendezvous
// service (besides "", the whole server).
inline constexpr const char* kHealthServiceName = "meshrun.v1.Rendezvous";

// The address the metrics port binds (see ServerOptions::metrics_host).
std::string MetricsHost(const ServerOptions& options);
// OK unless a TLS server without a token would serve its metrics beyond
// loopback: INVALID_ARGUMENT saying why and what to do.
absl::Status CheckMetricsExposure(const ServerOptions& options);

// The one warning for a server that anyone on the network may use: its host
// is not loopback and it has neither a token nor TLS. Empty otherwise.
std::string ExposureWarning(const ServerOptions& options);

class RendezvousServer {
 public:
  // Binds and starts serving. Running out of file descriptors does not stop
  // it for good: it warns, goes on serving the connections it has, and
  // accepts new ones again within limits.listener_check_interval (plus the
  // rebuild) once descriptors are free, the run state kept (the stopped
  // gRPC listener is replaced by a new server on the same port; the old one
  // serves its connections until their calls end: listener_watch.h).
  // SO_REUSEPORT is off, so a second server on the same port fails with
  // ALREADY_EXISTS ("address in use") — that is how an agent learns
  // another agent on its host already hosts the server.
  // INVALID_ARGUMENT for a bad host. Callback API: a waiting get, a join or
  // a watch parks a reactor, never a thread. The same port also serves
  // gRPC's standard health service (grpc.health.v1.Health: Check, Watch),
  // without the token, as grpc_health_probe and Kubernetes' gRPC probes
  // expect: "" and kHealthServiceName are SERVING until Shutdown starts.
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> Start(const ServerOptions& options);

  // Shuts down: parked calls are answered ABORTED and event streams end
  // with UNAVAILABLE, both carrying `why` (agents print it as the reason
  // they lost the server); calls still open after `grace` are cancelled.
  // Never hangs longer than `grace` plus the cancellation of in-flight
  // handlers. A second call does nothing. Not for concurrent callers.
  ~RendezvousServer();
  void Shutdown(absl::Duration grace, const std::string& why = "the rendezvous server is shutting down");

  // Waits until every agent's event stream has closed, or `timeout` passes
  // (the hosting meshrun outlives its clients). True when none is open.
  bool WaitForAgents(absl::Duration timeout);

  // A replica taking the lead: every run held is closed with `why` and
  // replaced by the runs `records` describe (RunRegistry::Restore), each
  // with `takeover` in its timeline (unless its kind is empty).
  // Thread-safe.
  void RestoreState(const std::vector<state::RunRecord>& records, const std::string& why,
                    const TimelineEvent& takeover = {});
  // A replica that stops leading: every run is closed with `why` and
  // dropped (RunRegistry::Clear), and so is every run's lighthouse (its
  // waiting calls get UNAVAILABLE). Thread-safe.
  void ClearState(const std::string& why);
  // The runs' lighthouses number their quorums above `floor` from now on
  // (LighthouseRegistry::RaiseQuorumIdFloor). Thread-safe.
  void RaiseQuorumIdFloor(int64_t floor);

  // The bound port (the OS's choice when options.port was 0).
  int port() const;
  // The metrics port, or -1 when metrics are off.
  int metrics_port() const;
  // "http://HOST:PORT/metrics" to scrape, with this
  // machine's host name for an any-address host; "" when metrics are off.
  std::string metrics_url() const;
  // "host:port" to reach this server, with the host as given in options
  // ("127.0.0.1" when it bound to all addresses).
  std::string endpoint() const;

 private:
  struct Impl;
  explicit RendezvousServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshrun::rendezvous
