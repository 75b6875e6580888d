// The Client's requests (etcd_client.h): KV, transactions, leases and the
// cluster's members, each one a CallSpec sent through Client::Impl::Call
// (client_impl.cc: member choice, fail-over, auth, failure messages).
#include "rendezvous/state/etcd/client/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_log.h"
#include "common/grpc_tls.h"
#include "rendezvous/state/etcd/client/client_impl.h"
#include "rendezvous/state/etcd/client/etcd_wire.h"

namespace meshrun::rendezvous::state::etcd {
namespace pb = ::etcdserverpb;

namespace {

bool AllRanges(const std::vector<Op>& ops) {
  for (const Op& op : ops) {
    if (op.kind != Op::Kind::kRange) return false;
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------- Client


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

absl::StatusOr<RangeResult> Client::Get(const std::string& key, const RangeOptions& options, absl::Duration timeout) {
  pb::RangeRequest req;
  wire::ToPb(key, options.range_end, options, &req);
  pb::RangeResponse resp;
  CallSpec spec{absl::StrCat("Range ", wire::ShowKey(key)), false, timeout, req.ByteSizeLong(), 0};
  spec.attempt_timeout = timeout;
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

absl::Status Client::Compact(int64_t revision) {
  pb::CompactionRequest req;
  req.set_revision(revision);
  req.set_physical(true);
  pb::CompactionResponse resp;
  const CallSpec spec{absl::StrCat("Compact ", revision), true, absl::ZeroDuration(), 0, 0};
  return impl_->Call(spec, [&](Member& m, grpc::ClientContext* ctx) { return m.kv->Compact(ctx, req, &resp); });
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
