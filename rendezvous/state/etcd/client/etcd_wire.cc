#include "rendezvous/state/etcd/client/etcd_wire.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace meshrun::rendezvous::state::etcd::wire {
namespace pb = ::etcdserverpb;

KeyValue FromPb(const ::mvccpb::KeyValue& kv) {
  KeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.version = kv.version();
  out.lease = kv.lease();
  return out;
}

RangeResult FromPb(const pb::RangeResponse& r) {
  RangeResult out;
  out.kvs.reserve(r.kvs_size());
  for (const auto& kv : r.kvs()) out.kvs.push_back(FromPb(kv));
  out.more = r.more();
  out.count = r.count();
  out.revision = r.header().revision();
  return out;
}

PutResult FromPb(const pb::PutResponse& r) {
  PutResult out;
  out.revision = r.header().revision();
  if (r.has_prev_kv()) {
    out.has_prev = true;
    out.prev = FromPb(r.prev_kv());
  }
  return out;
}

DeleteResult FromPb(const pb::DeleteRangeResponse& r) {
  DeleteResult out;
  out.revision = r.header().revision();
  out.deleted = r.deleted();
  for (const auto& kv : r.prev_kvs()) out.prev_kvs.push_back(FromPb(kv));
  return out;
}

namespace {
// The results of a Txn's ops, and of a nested Txn, may come without a header
// of their own: they happened at the Txn's revision.
TxnResult FromPbAt(const pb::TxnResponse& r, int64_t parent_revision);
}  // namespace

TxnResult FromPb(const pb::TxnResponse& r) { return FromPbAt(r, 0); }

namespace {
TxnResult FromPbAt(const pb::TxnResponse& r, int64_t parent_revision) {
  TxnResult out;
  out.succeeded = r.succeeded();
  out.revision = r.header().revision() != 0 ? r.header().revision() : parent_revision;
  for (const auto& op : r.responses()) {
    OpResult o;
    switch (op.response_case()) {
      case pb::ResponseOp::kResponseRange:
        o.kind = Op::Kind::kRange;
        o.range = FromPb(op.response_range());
        break;
      case pb::ResponseOp::kResponsePut:
        o.kind = Op::Kind::kPut;
        o.put = FromPb(op.response_put());
        break;
      case pb::ResponseOp::kResponseDeleteRange:
        o.kind = Op::Kind::kDelete;
        o.del = FromPb(op.response_delete_range());
        break;
      case pb::ResponseOp::kResponseTxn:
        o.kind = Op::Kind::kTxn;
        o.txn = std::make_shared<const TxnResult>(FromPbAt(op.response_txn(), out.revision));
        break;
      default:
        break;
    }
    if (o.range.revision == 0) o.range.revision = out.revision;
    if (o.put.revision == 0) o.put.revision = out.revision;
    if (o.del.revision == 0) o.del.revision = out.revision;
    out.results.push_back(std::move(o));
  }
  return out;
}
}  // namespace

WatchEvent FromPb(const ::mvccpb::Event& e) {
  WatchEvent out;
  out.type = e.type() == ::mvccpb::Event::DELETE ? WatchEvent::Type::kDelete : WatchEvent::Type::kPut;
  out.kv = FromPb(e.kv());
  if (e.has_prev_kv()) {
    out.has_prev = true;
    out.prev = FromPb(e.prev_kv());
  }
  return out;
}

void ToPb(const std::string& key, const std::string& range_end, const RangeOptions& o, pb::RangeRequest* out) {
  out->set_key(key);
  out->set_range_end(range_end);
  out->set_limit(o.limit);
  out->set_revision(o.revision);
  out->set_serializable(o.serializable);
  out->set_keys_only(o.keys_only);
  out->set_count_only(o.count_only);
  switch (o.sort) {
    case RangeOptions::Sort::kNone:
      out->set_sort_order(pb::RangeRequest::NONE);
      break;
    case RangeOptions::Sort::kAscend:
      out->set_sort_order(pb::RangeRequest::ASCEND);
      break;
    case RangeOptions::Sort::kDescend:
      out->set_sort_order(pb::RangeRequest::DESCEND);
      break;
  }
  switch (o.sort_target) {
    case RangeOptions::SortTarget::kKey:
      out->set_sort_target(pb::RangeRequest::KEY);
      break;
    case RangeOptions::SortTarget::kVersion:
      out->set_sort_target(pb::RangeRequest::VERSION);
      break;
    case RangeOptions::SortTarget::kCreate:
      out->set_sort_target(pb::RangeRequest::CREATE);
      break;
    case RangeOptions::SortTarget::kMod:
      out->set_sort_target(pb::RangeRequest::MOD);
      break;
    case RangeOptions::SortTarget::kValue:
      out->set_sort_target(pb::RangeRequest::VALUE);
      break;
  }
  out->set_max_create_revision(o.max_create_revision);
  out->set_min_create_revision(o.min_create_revision);
}

void ToPb(const Compare& c, pb::Compare* out) {
  out->set_key(c.key);
  if (!c.range_end.empty()) out->set_range_end(c.range_end);
  switch (c.result) {
    case Compare::Result::kEqual:
      out->set_result(pb::Compare::EQUAL);
      break;
    case Compare::Result::kGreater:
      out->set_result(pb::Compare::GREATER);
      break;
    case Compare::Result::kLess:
      out->set_result(pb::Compare::LESS);
      break;
    case Compare::Result::kNotEqual:
      out->set_result(pb::Compare::NOT_EQUAL);
      break;
  }
  switch (c.target) {
    case Compare::Target::kVersion:
      out->set_target(pb::Compare::VERSION);
      out->set_version(c.number);
      break;
    case Compare::Target::kCreateRevision:
      out->set_target(pb::Compare::CREATE);
      out->set_create_revision(c.number);
      break;
    case Compare::Target::kModRevision:
      out->set_target(pb::Compare::MOD);
      out->set_mod_revision(c.number);
      break;
    case Compare::Target::kValue:
      out->set_target(pb::Compare::VALUE);
      out->set_value(c.value);
      break;
    case Compare::Target::kLease:
      out->set_target(pb::Compare::LEASE);
      out->set_lease(c.number);
      break;
  }
}

void ToPb(const Op& op, pb::RequestOp* out) {
  switch (op.kind) {
    case Op::Kind::kRange:
      ToPb(op.key, op.range_end, op.range, out->mutable_request_range());
      break;
    case Op::Kind::kPut: {
      pb::PutRequest* p = out->mutable_request_put();
      p->set_key(op.key);
      p->set_value(op.value);
      p->set_lease(op.lease);
      p->set_prev_kv(op.prev_kv);
      break;
    }
    case Op::Kind::kDelete: {
      pb::DeleteRangeRequest* d = out->mutable_request_delete_range();
      d->set_key(op.key);
      d->set_range_end(op.range_end);
      d->set_prev_kv(op.prev_kv);
      break;
    }
    case Op::Kind::kTxn:
      if (op.txn) ToPb(*op.txn, out->mutable_request_txn());
      break;
  }
}

void ToPb(const Txn& txn, pb::TxnRequest* out) {
  for (const Compare& c : txn.compare) ToPb(c, out->add_compare());
  for (const Op& op : txn.success) ToPb(op, out->add_success());
  for (const Op& op : txn.failure) ToPb(op, out->add_failure());
}

size_t MaxTxnOps(const Txn& txn) {
  size_t most = std::max({txn.compare.size(), txn.success.size(), txn.failure.size()});
  for (const auto* ops : {&txn.success, &txn.failure}) {
    for (const Op& op : *ops) {
      if (op.kind == Op::Kind::kTxn && op.txn) most = std::max(most, MaxTxnOps(*op.txn));
    }
  }
  return most;
}

namespace {
bool IsEtcd(const grpc::Status& s) { return absl::StartsWith(s.error_message(), "etcdserver: "); }
}  // namespace

Failure Classify(const grpc::Status& s) {
  const std::string& m = s.error_message();
  if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED && absl::StrContains(m, "invalid auth token")) {
    return Failure::kInvalidToken;
  }
  if (m == "etcdserver: no leader") return Failure::kNoLeader;
  // Raft refused the proposal (etcd's leader changing, e.g. while it is
  // moved off a host): it never entered the log, so nothing was applied and
  // a write is tried again as without a leader.
  if (absl::StrContains(m, "raft proposal dropped")) return Failure::kNoLeader;
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return Failure::kTimeout;
  if (m == "etcdserver: too many requests") return Failure::kEtcdTransient;
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return IsEtcd(s) ? Failure::kEtcdTransient : Failure::kConnection;
  }
  return Failure::kFinal;
}

std::string ShowKey(absl::string_view key) {
  constexpr size_t kMax = 80;
  if (key.size() <= kMax) return absl::CHexEscape(key);
  return absl::StrCat(absl::CHexEscape(key.substr(0, kMax)), "...");
}

namespace {
std::string Bytes(size_t n) {
  if (n >= (1u << 20)) return absl::StrFormat("%.2f MiB", static_cast<double>(n) / (1 << 20));
  if (n >= (1u << 10)) return absl::StrFormat("%.1f KiB", static_cast<double>(n) / (1 << 10));
  return absl::StrCat(n, " bytes");
}
}  // namespace

absl::Status MapFinal(const grpc::Status& s, absl::string_view member, absl::string_view what, size_t request_bytes,
                      size_t txn_ops, absl::string_view user, absl::string_view user_flag,
                      absl::string_view password_flag) {
  const std::string& m = s.error_message();
  const std::string head = absl::StrCat("etcd ", member, ": ", what, ": ");
  if (absl::StrContains(m, "too many operations in txn request")) {
    return absl::ResourceExhaustedError(absl::StrCat(
        head, "refused: ", txn_ops, " operations in one list of the transaction; etcd allows at most 128 by default "
        "(its --max-txn-ops): split the writes or raise the limit on every member"));
  }
  if (absl::StrContains(m, "request is too large") ||
      (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && absl::StartsWith(m, "grpc: received message larger"))) {
    return absl::ResourceExhaustedError(absl::StrCat(
        head, "refused: the request is ", Bytes(request_bytes),
        "; etcd accepts at most 1.5 MiB by default (its --max-request-bytes): write fewer or smaller values, or raise "
        "the limit on every member (", m, ")"));
  }
  if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && absl::StrContains(m, "larger than max")) {
    return absl::ResourceExhaustedError(absl::StrCat(
        head, "the answer is larger than this client accepts (", m, "): read fewer keys at a time (a limit)"));
  }
  if (absl::StrContains(m, "database space exceeded")) {
    return absl::ResourceExhaustedError(absl::StrCat(
        head, "etcd's database is full (alarm NOSPACE): compact and defragment it, or raise its --quota-backend-bytes"));
  }
  if (absl::StrContains(m, "authentication failed, invalid user ID or password")) {
    return absl::UnauthenticatedError(absl::StrCat("etcd ", member, ": authentication refused for user '", user,
                                                   "': invalid user or password (check ", user_flag, " and ",
                                                   password_flag, ")"));
  }
  if (absl::StrContains(m, "user name is empty")) {
    return absl::UnauthenticatedError(absl::StrCat("etcd ", member, ": ", what,
                                                   ": etcd has authentication enabled and no user was given: set ",
                                                   user_flag, " and ", password_flag));
  }
  if (absl::StrContains(m, "authentication is not enabled")) {
    return absl::FailedPreconditionError(absl::StrCat("etcd ", member, ": ", user_flag, "='", user,
                                                      "' is set but etcd's authentication is not enabled: leave ",
                                                      user_flag, " out, or enable it (etcdctl auth enable)"));
  }
  if (s.error_code() == grpc::StatusCode::PERMISSION_DENIED || absl::StrContains(m, "permission denied")) {
    return absl::PermissionDeniedError(
        absl::StrCat(head, "permission denied for user '", user,
                     "': grant its role readwrite on meshrun's prefix (etcdctl role grant-permission --prefix)"));
  }
  if (absl::StrContains(m, "requested lease not found")) {
    return absl::NotFoundError(absl::StrCat(head, "the lease expired or was revoked (", m, ")"));
  }
  if (absl::StrContains(m, "required revision has been compacted")) {
    return absl::OutOfRangeError(absl::StrCat(head, "the revision was compacted: read the latest (", m, ")"));
  }
  if (absl::StrContains(m, "required revision is a future revision")) {
    return absl::OutOfRangeError(absl::StrCat(head, "the revision is in the future (", m, ")"));
  }
  if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    return absl::InvalidArgumentError(absl::StrCat(head, m));
  }
  // The code as etcd (or gRPC) gave it.
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat(head, m));
}

}  // namespace meshrun::rendezvous::state::etcd::wire
