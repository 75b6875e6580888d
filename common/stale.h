// How the rendezvous server tells a node that it was declared lost ("stale":
// silent past its keep-alive limit, or its stream ended while it ran), shared
// by the server and its clients. The refusal is FAILED_PRECONDITION with a
// one-line message and the gRPC status details (grpc::Status::error_details)
// set to kStaleDetail; as an absl::Status, a payload under kStalePayloadUrl
// (proto/wire.h's ToGrpc and FromGrpc carry one to the other). The agent
// recognises a stale node by the detail, never by the message's words, and
// rejoins as a new member (torchrun's agent restarts its workers when its
// rendezvous round is gone in the same way). Header-only, pure.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace meshrun {

inline constexpr absl::string_view kStaleDetail = "meshrun.stale";
inline constexpr absl::string_view kStalePayloadUrl = "type.meshrun.dev/meshrun.stale";

// FAILED_PRECONDITION with `message`, marked as a stale node's refusal.
inline absl::Status StaleStatus(absl::string_view message) {
  absl::Status s = absl::FailedPreconditionError(message);
  s.SetPayload(kStalePayloadUrl, absl::Cord("1"));
  return s;
}

// True when `s` says that the node was declared lost (StaleStatus).
inline bool IsStaleStatus(const absl::Status& s) { return s.GetPayload(kStalePayloadUrl).has_value(); }

// True when a gRPC status's error details say so (kStaleDetail).
inline bool IsStaleDetail(absl::string_view details) { return details == kStaleDetail; }

}  // namespace meshrun
