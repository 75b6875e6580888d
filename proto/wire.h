// Conversions between rendezvous.proto messages, gRPC statuses and the
// domain types of types.h, shared by the server's adapter and the agent's
// client (so both sides of the wire read it the same way).
#pragma once

#include <string>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "meshrun/proto/rendezvous.pb.h"
#include "proto/types.h"

namespace meshrun::rendezvous::wire {

// OK for a request that parsed; INVALID_ARGUMENT naming its type and size
// for one whose bytes did not (it arrives empty and marked:
// proto/malformed.h). The first check of every request the server or a
// node's store proxy serves. Pure, thread-safe.
absl::Status CheckWellFormed(const google::protobuf::Message& req);

// The absl::Status as a gRPC status: the same code (the two enumerations
// agree) and message. Pure, thread-safe.
grpc::Status ToGrpc(const absl::Status& s);
// The gRPC status as an absl::Status whose message starts with `what`.
absl::Status FromGrpc(const grpc::Status& s, const std::string& what);

// Domain type <-> message, field by field (rendezvous.proto documents each
// field). ToProto writes into `out` (fields it does not set are left as
// they were) or returns the message; FromProto reads every field, taking
// proto3's defaults for unset ones. Pure, thread-safe; none fails.
void ToProto(const WorkerFailure& f, v1::WorkerFailure* out);
WorkerFailure FromProto(const v1::WorkerFailure& f);
void ToProto(const Assignment& a, v1::Assignment* out);
Assignment FromProto(const v1::Assignment& a);
v1::RunEvent ToProto(const RunEvent& e);
RunEvent FromProto(const v1::RunEvent& e);
void ToProto(const RunStatus& r, v1::RunStatus* out);
RunStatus FromProto(const v1::RunStatus& r);
void ToProto(const ReplicaGroupState& g, v1::ReplicaGroupStatus* out);
ReplicaGroupState FromProto(const v1::ReplicaGroupStatus& g);

// The numeric IP address in a gRPC peer string ("ipv4:10.0.0.1:5000",
// "ipv6:[fd00::1]:5000", also percent-encoded as newer gRPC writes it),
// without an IPv6 zone (SplitPeer in common/net.h splits it); an IPv4-mapped IPv6 address ("::ffff:10.0.0.1")
// comes back as IPv4. Empty for anything else (e.g. "unix:/path"). Pure.
std::string PeerIp(const std::string& grpc_peer);

}  // namespace meshrun::rendezvous::wire
