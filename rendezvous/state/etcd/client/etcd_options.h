// The etcd connection's settings as a user gives them - meshrun server's
// --state and its companions (docs/etcd.md) - checked and turned into a
// Client's options. Reads the files (TLS, password) once, now, so that a bad
// setting fails at start with one line naming the flag and the fault.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "rendezvous/state/etcd/client/etcd_client.h"
#include "rendezvous/state/etcd/client/etcd_url.h"

namespace meshrun::rendezvous::state::etcd {

struct ConnectionFlags {
  std::string url;            // --state: etcd://... or etcds://... (etcd_url.h).
  TlsFiles tls;               // --state_tls_ca, --state_tls_cert, --state_tls_key: PEM file paths.
  std::string user;           // --state_user: etcd's user (etcd's auth); empty: none.
  std::string password_file;  // --state_password_file: its password, in a file of mode 0600 or stricter.
  // The client's timeouts (zero: ClientOptions' defaults).
  absl::Duration call_timeout = absl::ZeroDuration();  // --state_timeout
  absl::Duration dial_timeout = absl::ZeroDuration();
};

struct Connection {
  Url url;
  ClientOptions client;  // Ready for Client::Create.
};

// Parses the URL, loads and checks the TLS files (common/security.h's
// LoadTls: readable PEM, key matching certificate, not expired) and reads the
// password file (common/security.h's ReadTokenFile: mode 0600 or stricter,
// one trailing newline dropped). INVALID_ARGUMENT / PERMISSION_DENIED /
// NOT_FOUND, one line naming the flag (from `names`) and the fault: a bad
// URL; etcds:// without a CA; TLS files with an etcd:// URL; a certificate
// without its key; a user without a password file or the reverse; an
// unreadable, empty or too open password file. Does not connect.
absl::StatusOr<Connection> ResolveConnection(const ConnectionFlags& flags, const OptionNames& names = {});

}  // namespace meshrun::rendezvous::state::etcd
