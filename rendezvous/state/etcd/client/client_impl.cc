// Client::Impl (client_impl.h): picking a member and failing over between
// them, etcd's auth token, naming why a call failed, and the one Call that
// every request of etcd_client.cc goes through.
#include "rendezvous/state/etcd/client/client_impl.h"

#include "rendezvous/state/etcd/client/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/grpc_log.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/net.h"
#include "rendezvous/state/etcd/client/client_impl.h"
#include "rendezvous/state/etcd/client/etcd_wire.h"

namespace meshrun::rendezvous::state::etcd {
namespace pb = ::etcdserverpb;

namespace {

// The payload that marks a write whose outcome is unknown (OutcomeUnknown).
constexpr absl::string_view kOutcomeUnknownUrl = "meshrun.dev/etcd/outcome-unknown";

// Rounds over the members within one call: the first skips members whose
// last connection attempt failed; later ones retry them after a back-off.
constexpr int kRounds = 3;
constexpr absl::Duration kRoundBackoff = absl::Milliseconds(100);

std::string Seconds(absl::Duration d) { return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1))); }

// Runs fn(0..n-1) on threads of their own and waits for them all.
void ForEachParallel(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) threads.emplace_back(fn, i);
  for (auto& t : threads) t.join();
}

// A transient failure of one member, as a phrase.
std::string Describe(const grpc::Status& s, wire::Failure f, absl::Duration attempt) {
  switch (f) {
    case wire::Failure::kNoLeader:
      return "no leader (cut off from the other members, or quorum lost)";
    case wire::Failure::kTimeout:
      return absl::StrCat("no answer within ", Seconds(attempt));
    default:
      return s.error_message().empty() ? absl::StrCat("gRPC code ", s.error_code()) : s.error_message();
  }
}


}  // namespace


int Client::Impl::current() const {
  absl::MutexLock lock(&mu);
  return state.current;
}

void Client::Impl::SetCurrent(int i) {
  int before;
  {
    absl::MutexLock lock(&mu);
    before = state.current;
    state.current = i;
  }
  if (before != i) {
    Logger("rdzv")->warn("etcd: now talking to member {} (was {})", members[i]->name, members[before]->name);
  }
}

void Client::Impl::Prepare(grpc::ClientContext* ctx, absl::Time deadline, const std::string& token,
                           bool require_leader) const {
  ctx->set_deadline(absl::ToChronoTime(deadline));
  // etcd's clientv3.WithRequireLeader: a member without a leader refuses
  // at once ("etcdserver: no leader") instead of waiting for one.
  if (require_leader) ctx->AddMetadata("hasleader", "true");
  if (!token.empty()) ctx->AddMetadata("token", token);
}

bool Client::Impl::Ready(int i, absl::Time deadline, int round) {
  Member& m = *members[i];
  grpc_connectivity_state s = m.channel->GetState(/*try_to_connect=*/true);
  if (s == GRPC_CHANNEL_READY) return true;
  if (s == GRPC_CHANNEL_TRANSIENT_FAILURE) {
    if (round == 0) return false;
    // Retried now rather than after gRPC's back-off, if it accepts TCP at all.
    grpc::experimental::ChannelResetConnectionBackoff(m.channel.get());
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration() || !ProbeTcp(m.endpoint, std::min(left, options.dial_timeout)).ok()) return false;
  }
  bool attempted = false;
  // A connection attempt is a few state changes: bounded.
  for (int changes = 0; changes < 16; ++changes) {
    if (s == GRPC_CHANNEL_READY) return true;
    if (s == GRPC_CHANNEL_CONNECTING) {
      attempted = true;
    } else if ((s == GRPC_CHANNEL_TRANSIENT_FAILURE && attempted) || s == GRPC_CHANNEL_SHUTDOWN) {
      return false;
    }
    if (!m.channel->WaitForStateChange(s, absl::ToChronoTime(deadline))) return false;
    s = m.channel->GetState(true);
  }
  return s == GRPC_CHANNEL_READY;
}

absl::StatusOr<int> Client::Impl::PickReady(int start, absl::Time deadline) {
  const int n = static_cast<int>(members.size());
  for (int round = 0; round < kRounds; ++round) {
    for (int k = 0; k < n; ++k) {
      const int i = (start + k) % n;
      const absl::Time now = absl::Now();
      if (now >= deadline) break;
      if (Ready(i, std::min(deadline, now + options.dial_timeout), round)) return i;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    absl::SleepFor(std::min(left, kRoundBackoff * (1 << round)));  // Back-off between rounds.
  }
  std::vector<MemberOutcome> outcomes(members.size(), MemberOutcome{MemberOutcome::Kind::kNotConnected, ""});
  return Unreachable(CallSpec{"connect", false, absl::ZeroDuration(), 0, 0}, std::move(outcomes));
}

absl::StatusOr<std::string> Client::Impl::Token(Member& m, absl::Time deadline, grpc::Status* failure) {
  if (options.user.empty()) return std::string();
  {
    absl::MutexLock lock(&mu);
    if (!state.token.empty()) return state.token;
  }
  pb::AuthenticateRequest req;
  req.set_name(options.user);
  req.set_password(options.password);
  pb::AuthenticateResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, std::min(deadline, absl::Now() + options.attempt_timeout), "");
  grpc::Status s = m.auth->Authenticate(&ctx, req, &resp);
  if (!s.ok()) {
    *failure = s;
    if (wire::Classify(s) == wire::Failure::kFinal) {
      return wire::MapFinal(s, m.name, "Authenticate", 0, 0, options.user, options.names.user,
                            options.names.password_file);
    }
    return absl::UnavailableError(s.error_message());
  }
  absl::MutexLock lock(&mu);
  state.token = resp.token();
  return state.token;
}

void Client::Impl::DropToken(const std::string& token) {
  absl::MutexLock lock(&mu);
  if (state.token == token) state.token.clear();
}

std::string Client::Impl::ProbeCause(int i) {
  const Member& m = *members[i];
  absl::StatusOr<TcpRoute> route = ProbeTcp(m.endpoint, options.probe_timeout);
  if (!route.ok()) {
    // "127.0.0.1:2379: Connection refused" for member 127.0.0.1:2379: the
    // cause alone (a name keeps the addresses it resolved to).
    std::string cause(route.status().message());
    const std::string self = m.name + ": ";
    if (absl::StartsWith(cause, self) && cause.find("; ") == std::string::npos) cause.erase(0, self.size());
    return cause;
  }
  const TlsMaterial plain;
  const std::string tls = ProbeTlsMismatch(m.endpoint.host, route->remote, m.endpoint.port,
                                           options.use_tls ? options.tls : plain, options.probe_timeout);
  if (tls.empty()) {
    return absl::StrCat("it accepts TCP but no gRPC connection came up within ", Seconds(options.dial_timeout),
                        " (is it etcd's client port?)");
  }
  // ProbeTlsMismatch speaks of meshrun's own server and its variables: the
  // same causes in the words of an etcd connection.
  const OptionNames& n = options.names;
  if (absl::StrContains(tls, "does not speak TLS")) {
    return absl::StrCat("TLS mismatch: the member does not speak TLS but the ", n.url,
                        " URL is etcds://: use etcd://, or start etcd with --cert-file and --key-file");
  }
  if (absl::StrContains(tls, "speaks TLS and this node does not")) {
    return absl::StrCat("TLS mismatch: the member speaks TLS but the ", n.url, " URL is etcd://: use etcds:// with ",
                        n.ca, " (and ", n.cert, " and ", n.key, " when etcd has --client-cert-auth)");
  }
  if (absl::StrContains(tls, "requires a client certificate")) {
    return absl::StrCat("TLS mismatch: the member requires a client certificate (etcd's --client-cert-auth): set ",
                        n.cert, " and ", n.key);
  }
  if (absl::StrContains(tls, "refused this node's certificate")) {
    return absl::StrCat("TLS mismatch: the member refused the client certificate ", n.cert, "=",
                        options.tls.files.cert, ": is it signed by the CA of etcd's --trusted-ca-file?");
  }
  return absl::StrCat("TLS mismatch: ",
                      absl::StrReplaceAll(tls, {{"MESHRUN_TLS_CA", n.ca},
                                                {"MESHRUN_TLS_CERT", n.cert},
                                                {"MESHRUN_TLS_KEY", n.key},
                                                {"the server's certificate", "the member's certificate"},
                                                {"the server must", "etcd must"}}));
}

absl::Status Client::Impl::Unreachable(const CallSpec& spec, std::vector<MemberOutcome> outcomes) {
  using Kind = MemberOutcome::Kind;
  const int n = static_cast<int>(members.size());
  std::vector<int> leader_seen(n, -1);  // -1: no Status answer; 0: no leader; 1: has one.
  ForEachParallel(spec.diagnose ? n : 0, [&](int i) {
    if (outcomes[i].kind == Kind::kNotConnected) {
      outcomes[i].cause = ProbeCause(i);
      if (outcomes[i].cause.empty()) outcomes[i].cause = "not connected";
      return;
    }
    pb::StatusRequest req;
    pb::StatusResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options.probe_timeout));
    if (members[i]->maintenance->Status(&ctx, req, &resp).ok()) {
      leader_seen[i] = resp.leader() != 0 ? 1 : 0;
    } else if (outcomes[i].kind == Kind::kUntried) {
      outcomes[i].cause = ProbeCause(i);  // Why it does not answer either.
    }
  });
  std::vector<std::string> parts;
  int reachable = 0;
  int with_leader = 0;
  bool any_failed = false;
  for (int i = 0; i < n; ++i) {
    const MemberOutcome& o = outcomes[i];
    if (absl::StartsWith(o.cause, "TLS mismatch")) {
      return absl::FailedPreconditionError(absl::StrCat("etcd ", members[i]->name, ": ", o.cause));
    }
    if (leader_seen[i] >= 0) ++reachable;
    if (leader_seen[i] == 1) ++with_leader;
    any_failed = any_failed || o.kind == Kind::kFailed;
    std::string cause = o.cause;
    if (o.kind == Kind::kUntried && leader_seen[i] >= 0) {
      cause = leader_seen[i] == 1 ? "up, with a leader" : "up, no leader";
    } else if (cause.empty()) {
      cause = o.kind == Kind::kUntried ? "not tried" : o.kind == Kind::kNotConnected ? "not connected" : "no answer";
    }
    parts.push_back(absl::StrCat(members[i]->name, ": ", cause));
  }
  const std::string list = absl::StrJoin(parts, "; ");
  const std::string what = spec.what.empty() ? "" : absl::StrCat(spec.what, ": ");
  if (reachable == 0 && !any_failed) {
    return absl::UnavailableError(absl::StrCat("etcd unreachable: ", what, "no member answered (", list, ")"));
  }
  if (!spec.diagnose) {
    return absl::UnavailableError(absl::StrCat("etcd: ", what, "no member answered in time (", list, ")"));
  }
  if (reachable <= n / 2 || with_leader == 0) {
    return absl::UnavailableError(absl::StrCat("etcd has no leader (quorum lost: ", reachable, " of ", n,
                                               " members reachable", with_leader == 0 ? ", none with a leader" : "",
                                               "): ", what, list));
  }
  return absl::DeadlineExceededError(absl::StrCat("etcd: ", what, "no member answered in time (", list, ")"));
}

absl::Status Client::Impl::Call(const CallSpec& spec, const Invoke& invoke, int* member_out) {
  if (!options.on_call) return CallMembers(spec, invoke, member_out);
  const absl::Time start = absl::Now();
  absl::Status s = CallMembers(spec, invoke, member_out);
  options.on_call(spec.what.substr(0, spec.what.find(' ')), s.code(), absl::Now() - start);
  return s;
}

absl::Status Client::Impl::CallMembers(const CallSpec& spec, const Invoke& invoke, int* member_out) {
  using Kind = MemberOutcome::Kind;
  const absl::Duration total = spec.timeout > absl::ZeroDuration() ? spec.timeout : options.call_timeout;
  const absl::Time deadline = absl::Now() + total;
  const absl::Duration per_try =
      spec.attempt_timeout > absl::ZeroDuration() ? spec.attempt_timeout : options.attempt_timeout;
  const int n = static_cast<int>(members.size());
  std::vector<MemberOutcome> outcomes(n);
  bool reauthenticated = false;
  const int start = current();
  // Rounds over the members: kRounds at least, and more while etcd is up
  // but electing (a member said "no leader"), so a call rides out etcd's own
  // election (one to two election timeouts) rather than failing after the
  // first few hundred ms of it; for call_timeout at most, even for a call
  // given a longer time of its own (a state load's), so that a lost quorum
  // still fails such a call within call_timeout.
  const absl::Time electing_until = std::min(deadline, absl::Now() + options.call_timeout);
  bool electing = false;
  for (int round = 0; round < kRounds || (electing && absl::Now() < electing_until); ++round) {
    electing = false;
    for (int k = 0; k < n; ++k) {
      const int i = (start + k) % n;
      const absl::Time now = absl::Now();
      if (now >= deadline) break;
      if (!Ready(i, std::min(deadline, now + options.dial_timeout), round)) {
        outcomes[i] = MemberOutcome{Kind::kNotConnected, ""};  // Probed at the end, if it comes to that.
        continue;
      }
      Member& m = *members[i];
      grpc::Status auth_failure;
      absl::StatusOr<std::string> token = Token(m, deadline, &auth_failure);
      if (!token.ok()) {
        const wire::Failure f = wire::Classify(auth_failure);
        if (f == wire::Failure::kFinal || f == wire::Failure::kInvalidToken) return token.status();
        outcomes[i] = MemberOutcome{Kind::kFailed,
                                    absl::StrCat("Authenticate: ", Describe(auth_failure, f, options.attempt_timeout))};
        continue;
      }
      for (int attempt = 0; attempt < 2; ++attempt) {
        grpc::ClientContext ctx;
        Prepare(&ctx, std::min(deadline, absl::Now() + per_try), *token, spec.require_leader);
        grpc::Status s = invoke(m, &ctx);
        if (s.ok()) {
          SetCurrent(i);
          if (member_out != nullptr) *member_out = i;
          return absl::OkStatus();
        }
        const wire::Failure f = wire::Classify(s);
        if (f == wire::Failure::kInvalidToken && !reauthenticated) {
          reauthenticated = true;
          DropToken(*token);
          token = Token(m, deadline, &auth_failure);
          if (!token.ok()) return token.status();
          continue;  // The same member again, with the new token.
        }
        if (f == wire::Failure::kFinal || f == wire::Failure::kInvalidToken) {
          return wire::MapFinal(s, m.name, spec.what, spec.request_bytes, spec.txn_ops, options.user,
                                options.names.user, options.names.password_file);
        }
        outcomes[i] = MemberOutcome{Kind::kFailed, Describe(s, f, per_try)};
        electing = electing || f == wire::Failure::kNoLeader;
        if (spec.write && f != wire::Failure::kNoLeader) {
          // Sent, and perhaps applied: not retried. Say why, and whether
          // etcd still has a quorum.
          absl::Status why = Unreachable(spec, std::move(outcomes));
          absl::Status unknown(why.code() == absl::StatusCode::kFailedPrecondition ? absl::StatusCode::kUnavailable
                                                                                  : why.code(),
                               absl::StrCat(why.message(), "; the outcome of ", spec.what,
                                            " is unknown (etcd may have applied it)"));
          unknown.SetPayload(kOutcomeUnknownUrl, absl::Cord("1"));
          return unknown;
        }
        break;  // The next member.
      }
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    // Back-off between rounds: 100, 200, 400 ms, then 400 ms each.
    absl::SleepFor(std::min(left, kRoundBackoff * (1 << std::min(round, kRounds - 1))));
  }
  return Unreachable(spec, std::move(outcomes));
}

int Client::Impl::IndexOf(const Endpoint& member) const {
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i]->endpoint.host == member.host && members[i]->endpoint.port == member.port) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

bool OutcomeUnknown(const absl::Status& s) { return s.GetPayload(kOutcomeUnknownUrl).has_value(); }

}  // namespace meshrun::rendezvous::state::etcd
