#include "rendezvous/state/etcd/client/etcd_url.h"

#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace meshrun::rendezvous::state::etcd {
namespace {

constexpr absl::string_view kAllowed =
    "allowed: etcd://HOST:PORT[,HOST:PORT...][/PREFIX], or etcds:// for TLS (e.g. etcd://10.0.0.1:2379,10.0.0.2:2379,"
    "10.0.0.3:2379/meshrun)";

absl::Status Bad(absl::string_view text, absl::string_view why) {
  // Escaped: the message stays one line whatever the input holds.
  return absl::InvalidArgumentError(absl::StrCat("invalid --state URL '", absl::CHexEscape(text), "': ", why, "; ",
                                                 kAllowed));
}

bool HostCharOk(char c, bool bracketed) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
         (bracketed && (c == ':' || c == '%'));
}

// One "HOST[:PORT]" of the member list; `why` says what is wrong otherwise.
bool ParseMember(absl::string_view m, Endpoint* ep, std::string* why) {
  absl::string_view host;
  absl::string_view port_text;
  bool has_port = false;
  const bool bracketed = !m.empty() && m.front() == '[';
  if (bracketed) {
    const size_t close = m.find(']');
    if (close == absl::string_view::npos) {
      *why = absl::StrCat("member '", absl::CHexEscape(m), "' lacks the ']' of its IPv6 address");
      return false;
    }
    host = m.substr(1, close - 1);
    absl::string_view rest = m.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        *why = absl::StrCat("member '", absl::CHexEscape(m), "' has '", absl::CHexEscape(rest),
                            "' after ']' (expected ':PORT')");
        return false;
      }
      has_port = true;
      port_text = rest.substr(1);
    }
    if (!host.empty() && !absl::StrContains(host, ':')) {
      *why = absl::StrCat("member '", absl::CHexEscape(m), "': brackets are for IPv6 addresses and '",
                          absl::CHexEscape(host), "' is not one");
      return false;
    }
  } else {
    const size_t colon = m.find(':');
    if (colon != absl::string_view::npos && m.find(':', colon + 1) != absl::string_view::npos) {
      *why = absl::StrCat("member '", absl::CHexEscape(m), "': an IPv6 address needs brackets ([fd00::1]:2379)");
      return false;
    }
    host = m.substr(0, colon);
    if (colon != absl::string_view::npos) {
      has_port = true;
      port_text = m.substr(colon + 1);
    }
  }
  if (host.empty()) {
    *why = absl::StrCat("member '", absl::CHexEscape(m), "' has an empty host");
    return false;
  }
  for (char c : host) {
    if (!HostCharOk(c, bracketed)) {
      *why = absl::StrCat("member '", absl::CHexEscape(m), "': host '", absl::CHexEscape(host),
                          "' may only have letters, digits, '.', '-', '_' (and ':', '%' inside brackets)");
      return false;
    }
  }
  int port = kDefaultPort;
  if (has_port) {
    bool digits = !port_text.empty() && port_text.size() <= 5;
    for (char c : port_text) digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
    if (!digits || !absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
      *why = absl::StrCat("member '", absl::CHexEscape(m), "': port '", absl::CHexEscape(port_text),
                          "' is not an integer in 1..65535");
      return false;
    }
  }
  ep->host = std::string(host);
  ep->port = port;
  return true;
}

}  // namespace

std::string Url::MembersString() const {
  return absl::StrJoin(members, ",", [](std::string* out, const Endpoint& e) { out->append(e.ToString()); });
}

std::string Url::ToString() const { return absl::StrCat(tls ? "etcds://" : "etcd://", MembersString(), prefix); }

absl::StatusOr<Url> ParseUrl(absl::string_view text) {
  if (text.empty()) return Bad(text, "empty");
  const size_t sep = text.find("://");
  if (sep == absl::string_view::npos) return Bad(text, "no scheme");
  const std::string scheme = absl::AsciiStrToLower(text.substr(0, sep));
  Url url;
  if (scheme == "etcds") {
    url.tls = true;
  } else if (scheme != "etcd") {
    return Bad(text, absl::StrCat("scheme '", absl::CHexEscape(text.substr(0, sep)), "://' is not etcd:// or etcds://"));
  }
  absl::string_view rest = text.substr(sep + 3);
  if (const size_t q = rest.find_first_of("?#"); q != absl::string_view::npos) {
    return Bad(text, absl::StrCat("a query or fragment ('", absl::CHexEscape(rest.substr(q)), "') is not allowed"));
  }
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  absl::string_view path = slash == absl::string_view::npos ? absl::string_view() : rest.substr(slash);
  if (absl::StrContains(authority, '@')) {
    return Bad(text, "credentials ('user@') are not allowed in the URL; give etcd's user and password file apart");
  }
  if (authority.empty()) return Bad(text, "no member given");
  std::set<std::pair<std::string, int>> seen;
  for (absl::string_view m : absl::StrSplit(authority, ',')) {
    if (m.empty()) return Bad(text, "an empty member (two commas in a row, or a comma at an end)");
    if (static_cast<int>(url.members.size()) == kMaxMembers) {
      return Bad(text, absl::StrCat("more than ", kMaxMembers, " members"));
    }
    Endpoint ep;
    std::string why;
    if (!ParseMember(m, &ep, &why)) return Bad(text, why);
    if (!seen.emplace(absl::AsciiStrToLower(ep.host), ep.port).second) {
      return Bad(text, absl::StrCat("member ", ep.ToString(), " is given twice"));
    }
    url.members.push_back(std::move(ep));
  }
  if (path.empty()) {
    url.prefix = std::string(kDefaultPrefix);
    return url;
  }
  if (path == "/") return Bad(text, "the prefix '/' is empty: give one such as /meshrun, or leave the '/' out");
  absl::string_view p = path;
  if (absl::EndsWith(p, "/")) p.remove_suffix(1);
  if (static_cast<int>(p.size()) > kMaxPrefixBytes) {
    return Bad(text, absl::StrCat("the prefix is ", p.size(), " bytes, more than ", kMaxPrefixBytes));
  }
  for (absl::string_view seg : absl::StrSplit(p.substr(1), '/')) {
    if (seg.empty() || seg == "." || seg == "..") {
      return Bad(text, absl::StrCat("the prefix '", absl::CHexEscape(path),
                                    "' has an empty, '.' or '..' segment"));
    }
    for (char c : seg) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
        return Bad(text, absl::StrCat("the prefix '", absl::CHexEscape(path),
                                      "' may only have letters, digits, '.', '-', '_' between its '/'s"));
      }
    }
  }
  url.prefix = std::string(p);
  return url;
}

}  // namespace meshrun::rendezvous::state::etcd
