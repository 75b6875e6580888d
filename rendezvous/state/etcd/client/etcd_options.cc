#include "rendezvous/state/etcd/client/etcd_options.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace meshrun::rendezvous::state::etcd {
namespace {

// common/security.h words its errors for meshrun's own TLS variables and
// token files: the same faults, named by the etcd connection's flags.
absl::Status Rename(const absl::Status& s, const OptionNames& n) {
  std::string m = absl::StrReplaceAll(s.message(), {{"MESHRUN_TLS_CERT (tls_cert)", n.cert},
                                                     {"MESHRUN_TLS_KEY (tls_key)", n.key},
                                                     {"MESHRUN_TLS_CERT", n.cert},
                                                     {"MESHRUN_TLS_KEY", n.key},
                                                     {"MESHRUN_TLS_CA", n.ca},
                                                     {"token file", n.password_file}});
  return absl::Status(s.code(), m);
}

}  // namespace

absl::StatusOr<Connection> ResolveConnection(const ConnectionFlags& flags, const OptionNames& names) {
  Connection c;
  absl::StatusOr<Url> url = ParseUrl(flags.url);
  if (!url.ok()) {
    return absl::Status(url.status().code(), absl::StrReplaceAll(url.status().message(), {{"--state", names.url}}));
  }
  c.url = std::move(*url);
  if (c.url.tls && flags.tls.ca.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(names.url, "=", c.url.ToString(),
                                                   " asks for TLS (etcds://): set ", names.ca,
                                                   " to the CA that signed etcd's certificate"));
  }
  if (!c.url.tls && flags.tls.any()) {
    return absl::InvalidArgumentError(absl::StrCat(names.url, "=", c.url.ToString(), " is plain (etcd://) but ",
                                                   names.ca, " / ", names.cert, " / ", names.key,
                                                   " are set: use etcds:// for TLS"));
  }
  absl::StatusOr<TlsMaterial> tls = LoadTls(flags.tls);
  if (!tls.ok()) return Rename(tls.status(), names);
  if (flags.user.empty() != flags.password_file.empty()) {
    return absl::InvalidArgumentError(flags.user.empty()
                                          ? absl::StrCat(names.password_file, "=", flags.password_file,
                                                         " is set without ", names.user, ": set both or neither")
                                          : absl::StrCat(names.user, "=", flags.user, " is set without ",
                                                         names.password_file, ": set both or neither"));
  }
  if (!flags.password_file.empty()) {
    absl::StatusOr<std::string> password = ReadTokenFile(flags.password_file);
    if (!password.ok()) return Rename(password.status(), names);
    c.client.password = std::move(*password);
    c.client.user = flags.user;
  }
  c.client.members = c.url.members;
  c.client.use_tls = c.url.tls;
  c.client.tls = std::move(*tls);
  c.client.names = names;
  if (flags.call_timeout > absl::ZeroDuration()) c.client.call_timeout = flags.call_timeout;
  if (flags.dial_timeout > absl::ZeroDuration()) c.client.dial_timeout = flags.dial_timeout;
  return c;
}

}  // namespace meshrun::rendezvous::state::etcd
