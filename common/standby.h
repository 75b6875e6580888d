// How a standby replica of the rendezvous server says who leads
// (docs/design.md section 4d), shared by the server and its clients.
//
// A replica that does not lead answers every rendezvous and store call with
// UNAVAILABLE, a one-line message, and the gRPC status details
// (grpc::Status::error_details, the "grpc-status-details-bin" trailer) set to
// StandbyDetail(leader): "meshrun.standby leader=HOST:PORT" ("leader=" empty
// while no replica leads). A client recognises a standby by the details, not
// by the message, and follows the leader they name. Header-only, pure.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace meshrun {

inline constexpr absl::string_view kStandbyDetailPrefix = "meshrun.standby leader=";

// The status details of a standby's refusal; `leader` is "host:port" or "".
inline std::string StandbyDetail(absl::string_view leader) { return absl::StrCat(kStandbyDetailPrefix, leader); }

// True when `details` (a status's error details) come from a standby;
// `*leader` is then the leader it named ("" when none).
inline bool ParseStandbyDetail(absl::string_view details, std::string* leader) {
  if (!absl::StartsWith(details, kStandbyDetailPrefix)) return false;
  if (leader != nullptr) *leader = std::string(details.substr(kStandbyDetailPrefix.size()));
  return true;
}

// The same as an absl::Status (proto/wire.h's ToGrpc and FromGrpc carry it
// to and from the status details): UNAVAILABLE with `message`, the leader
// in a payload under kStandbyPayloadUrl.
inline constexpr absl::string_view kStandbyPayloadUrl = "type.meshrun.dev/meshrun.standby";
inline absl::Status StandbyStatus(absl::string_view message, absl::string_view leader) {
  absl::Status s = absl::UnavailableError(message);
  s.SetPayload(kStandbyPayloadUrl, absl::Cord(leader));
  return s;
}
// True when `s` is a standby's refusal; `*leader` is then who it named.
inline bool IsStandby(const absl::Status& s, std::string* leader) {
  auto p = s.GetPayload(kStandbyPayloadUrl);  // absl::optional<absl::Cord>
  if (!p) return false;
  if (leader != nullptr) *leader = std::string(*p);
  return true;
}

}  // namespace meshrun
