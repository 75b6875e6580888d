#include "client/channel.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checks.h"
#include "common/grpc_log.h"
#include "common/grpc_tls.h"
#include "common/logging.h"

namespace meshrun::client {
namespace {

int Ms(absl::Duration d) { return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, INT32_MAX)); }

// Sleeps up to `d`, waking every 100 ms to ask `interrupted`; its status
// when it says stop, OK otherwise.
absl::Status InterruptibleSleep(absl::Duration d, const std::function<absl::Status()>& interrupted) {
  const absl::Time until = absl::Now() + d;
  for (;;) {
    if (interrupted) {
      if (absl::Status s = interrupted(); !s.ok()) return s;
    }
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::OkStatus();
    absl::SleepFor(std::min(left, absl::Milliseconds(100)));
  }
}

// Waits for `channel` to become READY by `deadline`. `probe` names why a
// failed connection fails ("" when it finds nothing): asked at the first
// failure, after 1.5 s without a channel, then every 5 s; what it finds
// ends the wait at once. `refused_is_final`: a failure whose probe finds
// nothing ends the wait too (UNAVAILABLE `what` + "connection refused").
absl::Status WaitReady(grpc::Channel& channel, absl::Time deadline, const std::string& what,
                       const std::function<std::string()>& probe, bool refused_is_final,
                       const std::function<absl::Status()>& interrupted, absl::Duration timeout) {
  absl::Time next_probe = absl::Now() + absl::Milliseconds(1500);
  absl::Time last_probe = absl::InfinitePast();
  bool tried = false;
  for (;;) {
    grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) return absl::OkStatus();
    if (interrupted) {
      if (absl::Status s = interrupted(); !s.ok()) return s;
    }
    if (state == GRPC_CHANNEL_CONNECTING) tried = true;
    // A handshake the server ends with an alert goes back to IDLE.
    const bool failed = state == GRPC_CHANNEL_TRANSIENT_FAILURE || (tried && state == GRPC_CHANNEL_IDLE);
    if ((failed && absl::Now() - last_probe >= absl::Seconds(5)) || absl::Now() >= next_probe) {
      if (std::string cause = probe ? probe() : ""; !cause.empty()) {
        return absl::UnavailableError(absl::StrCat(what, ": ", cause));
      }
      last_probe = absl::Now();
      next_probe = last_probe + absl::Seconds(5);
      if (failed && refused_is_final) return absl::UnavailableError(absl::StrCat(what, ": connection refused"));
    }
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(
          absl::StrCat(what, " accepted a connection but no gRPC channel came up within ", absl::FormatDuration(timeout)));
    }
    channel.WaitForStateChange(state, absl::ToChronoTime(std::min(deadline, absl::Now() + absl::Milliseconds(100))));
  }
}

absl::StatusOr<Connection> DialUnix(const std::string& endpoint, const DialOptions& options) {
  MESHRUN_RETURN_IF_ERROR(CheckUnixEndpoint(endpoint));
  Connection c;
  c.endpoint = endpoint;
  c.channel = NewChannel(endpoint, "", TlsMaterial{}, options.channel);
  const std::string what = absl::StrCat("this node's store proxy at ", endpoint);
  MESHRUN_RETURN_IF_ERROR(WaitReady(*c.channel, absl::Now() + options.timeout, what, nullptr,
                                              !options.wait_for_server, options.interrupted, options.timeout));
  return c;
}

}  // namespace

bool IsUnixEndpoint(absl::string_view endpoint) { return absl::StartsWith(endpoint, "unix:"); }

absl::Status CheckUnixEndpoint(absl::string_view endpoint) {
  if (endpoint.size() >= 7 && absl::StartsWith(endpoint, "unix:/")) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("store endpoint '", endpoint, "': a Unix socket must be unix:/absolute/path"));
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& target, const std::string& tls_host,
                                          const TlsMaterial& tls, const ChannelSettings& settings) {
  RouteGrpcLogs();
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  if (settings.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, Ms(settings.initial_reconnect_backoff));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, Ms(settings.max_reconnect_backoff));
  if (settings.keepalive_time > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Ms(settings.keepalive_time));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Ms(settings.keepalive_timeout));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  args.SetMaxReceiveMessageSize(settings.max_receive_bytes);
  if (IsUnixEndpoint(target)) return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  SetTlsTargetName(tls, tls_host, &args);
  return grpc::CreateCustomChannel(target, ClientCredentials(tls), args);
}

std::string TlsMismatchCause(const Endpoint& ep, const TlsMaterial& tls, absl::Duration timeout) {
  absl::StatusOr<std::vector<std::string>> addrs = ResolveNumeric(ep.host);
  if (!addrs.ok() || addrs->empty()) return "";
  return ProbeTlsMismatch(ep.host, addrs->front(), ep.port, tls, timeout);
}

absl::StatusOr<Connection> Dial(const std::string& endpoint, const TlsMaterial& tls, const DialOptions& options) {
  if (IsUnixEndpoint(endpoint)) return DialUnix(endpoint, options);
  absl::StatusOr<Endpoint> ep = ParseEndpoint(endpoint, 29400);
  if (!ep.ok()) return ep.status();
  // Dial a numeric address this client actually reached (the server learns
  // from it which address the other nodes reach its host on), retrying
  // until the endpoint's host is up, with a line while it is not.
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options.timeout;
  absl::Duration backoff = absl::Milliseconds(50);
  absl::Time next_note = start + absl::Seconds(5);
  absl::StatusOr<TcpRoute> route = absl::UnavailableError("not tried");
  for (;;) {
    if (options.interrupted) {
      if (absl::Status s = options.interrupted(); !s.ok()) return s;
    }
    // One attempt per address, bounded so that an interruption is seen
    // within a second even when the host does not answer at all.
    const absl::Duration left = std::max(absl::Milliseconds(1), deadline - absl::Now());
    route = ProbeTcp(*ep, options.wait_for_server ? std::min(absl::Seconds(1), left) : left);
    if (route.ok() || !options.wait_for_server || absl::Now() >= deadline) break;
    if (backoff == absl::Milliseconds(50)) {
      Logger("agent")->debug("waiting for the rendezvous server at {} ({})", endpoint,
                             std::string(route.status().message()));
    }
    if (!options.wait_bound_name.empty() && absl::Now() >= next_note) {
      Logger("agent")->warn("waiting for the rendezvous server at {} ({}); giving up in {} ({})", endpoint,
                            std::string(route.status().message()),
                            absl::FormatDuration(absl::Trunc(deadline - absl::Now(), absl::Seconds(1))),
                            options.wait_bound_name);
      next_note = absl::Now() + absl::Seconds(15);
    }
    MESHRUN_RETURN_IF_ERROR(
        InterruptibleSleep(std::min(backoff, deadline - absl::Now()), options.interrupted));
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
  if (!route.ok()) {
    if (!options.wait_for_server) {
      return absl::UnavailableError(
          absl::StrCat("rendezvous server at ", endpoint, " is unreachable: ", route.status().message()));
    }
    return absl::UnavailableError(absl::StrCat("rendezvous server at ", endpoint, " is unreachable (waited ",
                                               absl::FormatDuration(options.timeout), "): ", route.status().message()));
  }
  Connection c;
  c.endpoint = endpoint;
  c.route = *route;
  const std::string& tls_name = options.tls_name.empty() ? ep->host : options.tls_name;
  c.channel = NewChannel(NumericTarget(route->remote, ep->port), tls_name, tls, options.channel);
  // gRPC retries a failing handshake quietly until the deadline: probe
  // once to name a TLS mismatch and fail at once when one is found.
  const absl::Time wait_until = std::max(deadline, absl::Now() + absl::Seconds(1));
  auto probe = [&] {
    return ProbeTlsMismatch(tls_name, route->remote, ep->port, tls,
                            std::clamp(wait_until - absl::Now(), absl::Milliseconds(100), absl::Seconds(5)));
  };
  MESHRUN_RETURN_IF_ERROR(
      WaitReady(*c.channel, wait_until, absl::StrCat("rendezvous server at ", endpoint, " (", route->remote, ")"),
                probe, /*refused_is_final=*/false, options.interrupted, options.timeout));
  return c;
}

}  // namespace meshrun::client
