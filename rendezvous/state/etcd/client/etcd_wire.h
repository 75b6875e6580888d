// Internal to rendezvous/state/etcd: etcd_types.h values to and from etcd's
// protobuf messages, and what an etcd error (a grpc::Status) means. Includes
// the generated stubs: only the client's .cc files include it.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "etcd/etcdserver/etcdserverpb/rpc.pb.h"
#include "rendezvous/state/etcd/client/etcd_types.h"

namespace meshrun::rendezvous::state::etcd::wire {

KeyValue FromPb(const ::mvccpb::KeyValue& kv);
RangeResult FromPb(const ::etcdserverpb::RangeResponse& r);
PutResult FromPb(const ::etcdserverpb::PutResponse& r);
DeleteResult FromPb(const ::etcdserverpb::DeleteRangeResponse& r);
TxnResult FromPb(const ::etcdserverpb::TxnResponse& r);
WatchEvent FromPb(const ::mvccpb::Event& e);

void ToPb(const std::string& key, const std::string& range_end, const RangeOptions& o,
          ::etcdserverpb::RangeRequest* out);
void ToPb(const Compare& c, ::etcdserverpb::Compare* out);
void ToPb(const Op& op, ::etcdserverpb::RequestOp* out);
void ToPb(const Txn& txn, ::etcdserverpb::TxnRequest* out);

// The most ops in one list (compare, success or failure) of `txn` or of any
// Txn nested in it: what etcd holds against --max-txn-ops.
size_t MaxTxnOps(const Txn& txn);

// What a failed call means for the client's next step.
enum class Failure {
  kInvalidToken,  // etcd's auth token expired or is unknown: authenticate again.
  kNoLeader,      // "etcdserver: no leader" or "raft proposal dropped": never proposed, nothing applied; retried.
  kConnection,    // gRPC's UNAVAILABLE (connection refused, reset, closed): may have been sent.
  kTimeout,       // The attempt's deadline passed: may have been applied.
  kEtcdTransient, // etcd's own UNAVAILABLE (request timed out, leader changed, too many requests, stopped).
  kFinal,         // Anything else: the answer stands.
};
Failure Classify(const grpc::Status& s);

// The key as it appears in messages: escaped, at most 80 bytes.
std::string ShowKey(absl::string_view key);

// A final error of etcd (or gRPC) as one line "etcd <member>: <what>: <cause>"
// with meshrun's canonical code (etcd_client.h lists them). `request_bytes`
// and `txn_ops` word the limits' messages; `user` and `names` the auth ones.
absl::Status MapFinal(const grpc::Status& s, absl::string_view member, absl::string_view what, size_t request_bytes,
                      size_t txn_ops, absl::string_view user, absl::string_view user_flag,
                      absl::string_view password_flag);

}  // namespace meshrun::rendezvous::state::etcd::wire
