// --rdzv_conf: torchrun's "key=value,..." rendezvous options (its
// RendezvousParameters config), plus meshrun's own keys (TLS, token, metrics
// port, store proxy bounds, the embedded server's limits), each checked and
// written into a LaunchConfig. The keys and their meaning: the --rdzv_conf
// table in docs/user-guide.md.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launcher/launch_config.h"

namespace meshrun::launcher {

// Parses `text` ("k1=v1,k2=v2"; empty: nothing to do) into `config`, key by
// key, in order. Timeouts are seconds (fractions allowed, 0..31536000);
// tls_* and token_file are recorded as paths, not read; server limits
// (rendezvous/policy/limits.h names) go to config->server_limits. As torchrun,
// `timeout` is a synonym of join_timeout, and close_timeout and
// heartbeat_timeout are checked but have no effect. INVALID_ARGUMENT with
// one line naming the key, the value and what is allowed; an unknown key's
// error lists the known keys and the server limits. On an error, the keys
// before the bad one have been applied. Reads no file; not thread-safe on
// one `config`.
absl::Status ApplyRdzvConf(const std::string& text, LaunchConfig* config);

// A number of seconds, 0..31536000 (a year); NaN and infinities are
// refused. `what` names the setting in the error ("join_timeout",
// "--shutdown_timeout"): INVALID_ARGUMENT "<what>=<value>: must be a number
// of seconds, 0..31536000 (a year)". Pure.
absl::StatusOr<absl::Duration> ParseSeconds(const std::string& what, const std::string& value);

}  // namespace meshrun::launcher
