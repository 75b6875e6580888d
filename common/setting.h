// How the rendezvous server says which of a run's settings a refusal is
// about, shared by the server and its clients. The server's domain words
// its refusals in the domain's terms ("the node count conflicts in run
// 'job': ..."), never in a launcher's flags; it marks the refusal with the
// setting's name (kNodeCount, ...), and a client that has flags for them
// (meshrun's agent: --nnodes, --max_restarts, --node_rank, --local_addr)
// names its own flag next to the message. Over gRPC the name travels in the
// status details (grpc::Status::error_details: "meshrun.setting=NAME"); as
// an absl::Status, in a payload under kSettingPayloadUrl (proto/wire.h's
// ToGrpc and FromGrpc carry one to the other; a JOIN_ANSWERED event carries
// the details too). Header-only, pure.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace meshrun {

// The settings a refusal may name.
inline constexpr absl::string_view kNodeCount = "node_count";            // min and max nodes of a run
inline constexpr absl::string_view kMaxRestarts = "max_restarts";        // restarts a run allows
inline constexpr absl::string_view kNodeRank = "node_rank";              // a node rank asked for
inline constexpr absl::string_view kAdvertisedAddress = "advertised_address";  // the address a node gave

inline constexpr absl::string_view kSettingDetailPrefix = "meshrun.setting=";
inline constexpr absl::string_view kSettingPayloadUrl = "type.meshrun.dev/meshrun.setting";

// `code` with `message`, marked as being about `setting`.
inline absl::Status SettingStatus(absl::StatusCode code, absl::string_view message, absl::string_view setting) {
  absl::Status s(code, message);
  s.SetPayload(kSettingPayloadUrl, absl::Cord(setting));
  return s;
}

// The setting `s` is about, or nullopt.
inline std::optional<std::string> SettingOf(const absl::Status& s) {
  auto p = s.GetPayload(kSettingPayloadUrl);
  if (!p) return std::nullopt;
  return std::string(*p);
}

// The status details for `setting`, and back (nullopt: not a setting's).
inline std::string SettingDetail(absl::string_view setting) { return absl::StrCat(kSettingDetailPrefix, setting); }
inline std::optional<std::string> ParseSettingDetail(absl::string_view details) {
  if (!absl::StartsWith(details, kSettingDetailPrefix)) return std::nullopt;
  return std::string(details.substr(kSettingDetailPrefix.size()));
}

}  // namespace meshrun
