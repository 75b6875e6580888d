#include "rendezvous/state/etcd/etcd_client.h"

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
#include "rendezvous/state/etcd/client_impl.h"
#include "rendezvous/state/etcd/etcd_wire.h"

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

bool AllRanges(const std::vector<Op>& ops) {
  for (const Op& op : ops) {
    if (op.kind != Op::Kind::kRange) return false;
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------- Impl

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
  using Kind = MemberOutcome::Kind;
  const absl::Duration total = spec.timeout > absl::ZeroDuration() ? spec.timeout : options.call_timeout;
  const absl::Time deadline = absl::Now() + total;
  const int n = static_cast<int>(members.size());
  std::vector<MemberOutcome> outcomes(n);
  bool reauthenticated = false;
  const int start = current();
  for (int round = 0; round < kRounds; ++round) {
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
        Prepare(&ctx, std::min(deadline, absl::Now() + options.attempt_timeout), *token, spec.require_leader);
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
        outcomes[i] = MemberOutcome{Kind::kFailed, Describe(s, f, options.attempt_timeout)};
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
    absl::SleepFor(std::min(left, kRoundBackoff * (1 << round)));  // Back-off between rounds.
  }
  return Unreachable(spec, std::move(outcomes));
}

// ---------------------------------------------------------------- Client

bool OutcomeUnknown(const absl::Status& s) { return s.GetPayload(kOutcomeUnknownUrl).has_value(); }

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  const OptionNames& n = options.names;
  if (options.members.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(n.url, " names no etcd member"));
  }
  if (options.use_tls && !options.tls.client_tls()) {
    return absl::InvalidArgumentError(
        absl::StrCat("an etcds:// ", n.url, " needs the CA that signed etcd's certificate: set ", n.ca));
  }
  if (!options.use_tls && (options.tls.client_tls() || !options.tls.cert_pem.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(n.ca, " / ", n.cert, " are set but the ", n.url,
                                                   " URL is etcd:// (plain): use etcds:// for TLS"));
  }
  if (options.user.empty() != options.password.empty()) {
    return absl::InvalidArgumentError(options.user.empty()
                                          ? absl::StrCat("a password (", n.password_file, ") is set without ", n.user)
                                          : absl::StrCat(n.user, "='", options.user, "' is set without a password (",
                                                         n.password_file, ")"));
  }
  for (const auto& [name, d] : {std::pair<const char*, absl::Duration>{"call_timeout", options.call_timeout},
                                {"attempt_timeout", options.attempt_timeout},
                                {"dial_timeout", options.dial_timeout},
                                {"probe_timeout", options.probe_timeout},
                                {"keepalive_time", options.keepalive_time},
                                {"keepalive_timeout", options.keepalive_timeout}}) {
    if (d <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd client option ", name, "=", absl::FormatDuration(d), " must be positive"));
    }
  }
  RouteGrpcLogs();
  auto impl = std::make_unique<Impl>();
  const TlsMaterial plain;
  for (const Endpoint& ep : options.members) {
    auto m = std::make_unique<Member>();
    m->endpoint = ep;
    m->name = ep.ToString();
    grpc::ChannelArguments args;
    // A connection of this client's own (not shared through gRPC's global
    // subchannel pool). gRPC retries no call by itself but those that never
    // left this process (its transparent retries): the client does the rest.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
    // etcd refuses pings on a connection without streams (its enforcement
    // policy); with streams open, pings go on without data in between.
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.min_reconnect_backoff)));
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.min_reconnect_backoff)));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.max_reconnect_backoff)));
    args.SetMaxReceiveMessageSize(options.max_receive_bytes);
    args.SetMaxSendMessageSize(-1);
    const TlsMaterial& tls = options.use_tls ? options.tls : plain;
    SetTlsTargetName(tls, ep.host, &args);
    m->channel = grpc::CreateCustomChannel(m->name, ClientCredentials(tls), args);
    m->kv = pb::KV::NewStub(m->channel);
    m->watch = pb::Watch::NewStub(m->channel);
    m->lease = pb::Lease::NewStub(m->channel);
    m->cluster = pb::Cluster::NewStub(m->channel);
    m->maintenance = pb::Maintenance::NewStub(m->channel);
    m->auth = pb::Auth::NewStub(m->channel);
    impl->members.push_back(std::move(m));
  }
  impl->options = std::move(options);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const ClientOptions& Client::options() const { return impl_->options; }

std::string Client::current_member() const { return impl_->members[impl_->current()]->name; }

absl::Status Client::Connect() {
  pb::StatusRequest req;
  pb::StatusResponse resp;
  return impl_->Call(CallSpec{"connect", false, absl::ZeroDuration(), 0, 0},
                     [&](Member& m, grpc::ClientContext* ctx) { return m.maintenance->Status(ctx, req, &resp); });
}

absl::StatusOr<RangeResult> Client::Get(const std::string& key, const RangeOptions& options) {
  pb::RangeRequest req;
  wire::ToPb(key, options.range_end, options, &req);
  pb::RangeResponse resp;
  CallSpec spec{absl::StrCat("Range ", wire::ShowKey(key)), false, absl::ZeroDuration(), req.ByteSizeLong(), 0};
  spec.require_leader = !options.serializable;
  absl::Status s = impl_->Call(spec, [&](Member& m, grpc::ClientContext* ctx) {
    resp.Clear();
    return m.kv->Range(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return wire::FromPb(resp);
}

absl::StatusOr<RangeResult> Client::GetPrefix(const std::string& prefix, RangeOptions options) {
  options.range_end = PrefixEnd(prefix);
  return Get(prefix, options);
}

absl::StatusOr<PutResult> Client::Put(const std::string& key, const std::string& value, int64_t lease, bool prev_kv) {
  pb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  req.set_prev_kv(prev_kv);
  pb::PutResponse resp;
  const CallSpec spec{absl::StrCat("Put ", wire::ShowKey(key)), true, absl::ZeroDuration(), req.ByteSizeLong(), 0};
  absl::Status s = impl_->Call(spec, [&](Member& m, grpc::ClientContext* ctx) {
    resp.Clear();
    return m.kv->Put(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return wire::FromPb(resp);
}

absl::StatusOr<DeleteResult> Client::Delete(const std::string& key, const std::string& range_end, bool prev_kv) {
  pb::DeleteRangeRequest req;
  req.set_key(key);
  req.set_range_end(range_end);
  req.set_prev_kv(prev_kv);
  pb::DeleteRangeResponse resp;
  const CallSpec spec{absl::StrCat("DeleteRange ", wire::ShowKey(key)), true, absl::ZeroDuration(),
                      req.ByteSizeLong(), 0};
  absl::Status s = impl_->Call(spec, [&](Member& m, grpc::ClientContext* ctx) {
    resp.Clear();
    return m.kv->DeleteRange(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return wire::FromPb(resp);
}

absl::StatusOr<DeleteResult> Client::DeletePrefix(const std::string& prefix) {
  return Delete(prefix, PrefixEnd(prefix));
}

absl::StatusOr<TxnResult> Client::Transact(const Txn& txn) {
  pb::TxnRequest req;
  wire::ToPb(txn, &req);
  pb::TxnResponse resp;
  const size_t ops = wire::MaxTxnOps(txn);
  const bool write = !(AllRanges(txn.success) && AllRanges(txn.failure));
  const CallSpec spec{absl::StrCat("Txn (", txn.compare.size(), " compares, ", txn.success.size(), "+",
                                   txn.failure.size(), " ops)"),
                      write, absl::ZeroDuration(), req.ByteSizeLong(), ops};
  absl::Status s = impl_->Call(spec, [&](Member& m, grpc::ClientContext* ctx) {
    resp.Clear();
    return m.kv->Txn(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return wire::FromPb(resp);
}

absl::StatusOr<Lease> Client::LeaseGrant(int64_t ttl_s) {
  if (ttl_s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("lease TTL ", ttl_s, " s: must be at least 1 s"));
  }
  pb::LeaseGrantRequest req;
  req.set_ttl(ttl_s);
  pb::LeaseGrantResponse resp;
  // Retried like a read: a grant whose answer was lost leaves a lease nobody
  // keeps alive, which expires by its TTL.
  const CallSpec spec{absl::StrCat("LeaseGrant ", ttl_s, " s"), false, absl::ZeroDuration(), 0, 0};
  absl::Status s = impl_->Call(spec, [&](Member& m, grpc::ClientContext* ctx) {
    resp.Clear();
    return m.lease->LeaseGrant(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  if (!resp.error().empty()) {
    return absl::UnavailableError(absl::StrCat("etcd: LeaseGrant ", ttl_s, " s: ", resp.error()));
  }
  return Lease{resp.id(), resp.ttl()};
}

absl::Status Client::LeaseRevoke(int64_t id) {
  pb::LeaseRevokeRequest req;
  req.set_id(id);
  pb::LeaseRevokeResponse resp;
  const CallSpec spec{absl::StrCat("LeaseRevoke ", absl::Hex(id)), true, absl::ZeroDuration(), 0, 0};
  return impl_->Call(spec, [&](Member& m, grpc::ClientContext* ctx) { return m.lease->LeaseRevoke(ctx, req, &resp); });
}

namespace {
// One renewal over etcd's LeaseKeepAlive stream (clientv3's KeepAliveOnce).
grpc::Status KeepAliveOnceOn(Member& m, grpc::ClientContext* ctx, int64_t id, pb::LeaseKeepAliveResponse* resp) {
  auto stream = m.lease->LeaseKeepAlive(ctx);
  pb::LeaseKeepAliveRequest req;
  req.set_id(id);
  if (!stream->Write(req) || !stream->Read(resp)) return stream->Finish();
  ctx->TryCancel();
  stream->Finish();  // CANCELLED: the answer is in.
  return grpc::Status::OK;
}
}  // namespace

absl::StatusOr<int64_t> Client::LeaseKeepAliveOnce(int64_t id, absl::Duration timeout) {
  return impl_->KeepAliveOnce(id, timeout, true);
}

absl::StatusOr<int64_t> Client::Impl::KeepAliveOnce(int64_t id, absl::Duration timeout, bool diagnose) {
  pb::LeaseKeepAliveResponse resp;
  CallSpec spec{absl::StrCat("LeaseKeepAlive ", absl::Hex(id)), false, timeout, 0, 0};
  spec.diagnose = diagnose;
  absl::Status s = Call(spec, [&](Member& m, grpc::ClientContext* ctx) {
    resp.Clear();
    return KeepAliveOnceOn(m, ctx, id, &resp);
  });
  if (!s.ok()) return s;
  if (resp.ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd: lease ", absl::Hex(id), " expired or was revoked"));
  }
  return resp.ttl();
}

absl::StatusOr<int64_t> Client::LeaseTimeToLive(int64_t id) {
  pb::LeaseTimeToLiveRequest req;
  req.set_id(id);
  pb::LeaseTimeToLiveResponse resp;
  const CallSpec spec{absl::StrCat("LeaseTimeToLive ", absl::Hex(id)), false, absl::ZeroDuration(), 0, 0};
  absl::Status s = impl_->Call(spec, [&](Member& m, grpc::ClientContext* ctx) {
    resp.Clear();
    return m.lease->LeaseTimeToLive(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  if (resp.ttl() < 0) {
    return absl::NotFoundError(absl::StrCat("etcd: lease ", absl::Hex(id), " expired or was revoked"));
  }
  return resp.ttl();
}

int Client::Impl::IndexOf(const Endpoint& member) const {
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i]->endpoint.host == member.host && members[i]->endpoint.port == member.port) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

absl::Status Client::MoveLeader(const Endpoint& via, uint64_t transferee_id) {
  const int index = impl_->IndexOf(via);
  if (index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("etcd member ", via.ToString(), " is not one of this client's"));
  }
  Member& m = *impl_->members[index];
  const absl::Time deadline = absl::Now() + impl_->options.call_timeout;
  grpc::Status auth_failure;
  absl::StatusOr<std::string> token = impl_->Token(m, deadline, &auth_failure);
  if (!token.ok()) return token.status();
  pb::MoveLeaderRequest req;
  req.set_targetid(transferee_id);
  pb::MoveLeaderResponse resp;
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline, *token);
  grpc::Status s = m.maintenance->MoveLeader(&ctx, req, &resp);
  if (s.ok()) return absl::OkStatus();
  if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) impl_->DropToken(*token);
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("etcd ", m.name, ": MoveLeader to member ", absl::Hex(transferee_id), ": ",
                                   s.error_message()));
}

absl::StatusOr<MemberStatus> Client::StatusOf(const Endpoint& member) {
  const int index = impl_->IndexOf(member);
  if (index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("etcd member ", member.ToString(), " is not one of this client's"));
  }
  Member& m = *impl_->members[index];
  pb::StatusRequest req;
  pb::StatusResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + impl_->options.call_timeout));
  grpc::Status s = m.maintenance->Status(&ctx, req, &resp);
  if (!s.ok()) {
    std::string cause = impl_->ProbeCause(index);
    if (cause.empty()) cause = s.error_message();
    return absl::UnavailableError(absl::StrCat("etcd ", m.name, ": Status: ", cause));
  }
  MemberStatus out;
  out.endpoint = m.name;
  out.version = resp.version();
  out.member_id = resp.header().member_id();
  out.leader = resp.leader();
  out.raft_term = resp.raftterm();
  out.raft_index = static_cast<int64_t>(resp.raftindex());
  out.db_size = resp.dbsize();
  for (const auto& e : resp.errors()) out.errors.push_back(e);
  return out;
}

absl::StatusOr<std::vector<MemberInfo>> Client::MemberList() {
  pb::MemberListRequest req;
  pb::MemberListResponse resp;
  absl::Status s = impl_->Call(CallSpec{"MemberList", false, absl::ZeroDuration(), 0, 0},
                               [&](Member& m, grpc::ClientContext* ctx) {
                                 resp.Clear();
                                 return m.cluster->MemberList(ctx, req, &resp);
                               });
  if (!s.ok()) return s;
  std::vector<MemberInfo> out;
  for (const auto& pm : resp.members()) {
    MemberInfo mi;
    mi.id = pm.id();
    mi.name = pm.name();
    mi.peer_urls.assign(pm.peerurls().begin(), pm.peerurls().end());
    mi.client_urls.assign(pm.clienturls().begin(), pm.clienturls().end());
    mi.is_learner = pm.islearner();
    out.push_back(std::move(mi));
  }
  return out;
}

}  // namespace meshrun::rendezvous::state::etcd
