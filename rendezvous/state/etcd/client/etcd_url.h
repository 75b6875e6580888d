// The `--state` URL of a replicated rendezvous server: which etcd members to
// talk to, whether over TLS, and the key prefix under which meshrun keeps its
// state. Pure (no I/O, no DNS); also fuzzed (tests/fuzz/fuzz_etcd_url.cc).
//
//   etcd://HOST:PORT[,HOST:PORT...][/PREFIX]     plain gRPC to etcd
//   etcds://HOST:PORT[,HOST:PORT...][/PREFIX]    TLS (the CA and, for etcd's
//                                                --client-cert-auth, a client
//                                                certificate are given apart:
//                                                etcd_options.h)
//
// HOST is a name, an IPv4 address or a bracketed IPv6 address ("[fd00::1]");
// PORT is 1..65535 and may be left out for etcd's client port, 2379. PREFIX
// is one or more '/'-separated segments of letters, digits, '.', '-' and '_'
// (no empty, "." or ".." segment; a trailing '/' is dropped); without it the
// prefix is "/meshrun". Credentials never go into the URL (etcd_options.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/endpoint.h"

namespace meshrun::rendezvous::state::etcd {

// etcd's default client port.
inline constexpr int kDefaultPort = 2379;
// The prefix when the URL names none.
inline constexpr absl::string_view kDefaultPrefix = "/meshrun";
// At most this many members in one URL (an etcd cluster has 3, 5 or 7).
inline constexpr int kMaxMembers = 32;
// At most this many bytes of prefix.
inline constexpr int kMaxPrefixBytes = 256;

struct Url {
  bool tls = false;               // etcds://
  std::vector<Endpoint> members;  // In the order given (the first is tried first); no duplicates.
  std::string prefix;             // "/meshrun" or as given: starts with '/', never ends with one.

  // The canonical text ("etcd://h1:2379,[::1]:2379/meshrun"): parses back to
  // an equal Url. Pure.
  std::string ToString() const;
  // "h1:2379,h2:2379": the members alone, for messages. Pure.
  std::string MembersString() const;
};

// Parses a --state URL of the form above. Errors are INVALID_ARGUMENT, one
// line naming the bad value and the allowed form: a scheme other than etcd://
// or etcds://, no member, an empty host, a bad port, a member given twice,
// credentials ("user@"), a query or fragment, a bad prefix. Pure.
absl::StatusOr<Url> ParseUrl(absl::string_view text);

}  // namespace meshrun::rendezvous::state::etcd
