#include "common/endpoint.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace meshrun {
namespace {

absl::Status Bad(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "invalid endpoint '", text, "': ", why,
      "; allowed: host, host:port, 1.2.3.4:port, [v6addr]:port"));
}

// A host name or IPv4 address: letters, digits, '.', '-', '_'. Inside
// brackets also ':' and '%' (an IPv6 address, with a zone: "fe80::1%eth0").
bool HostCharsOk(absl::string_view host, bool bracketed) {
  for (char c : host) {
    const bool ok = absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
                    (bracketed && (c == ':' || c == '%'));
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string HostPort(absl::string_view host, int port) {
  if (absl::StrContains(host, ':')) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

std::string Endpoint::ToString() const { return HostPort(host, port); }

bool Endpoint::IsIpv6Literal() const { return absl::StrContains(host, ':'); }

absl::StatusOr<Endpoint> ParseEndpoint(absl::string_view text, int default_port) {
  if (text.empty()) return Bad(text, "empty");
  if (const size_t scheme = text.find("://"); scheme != absl::string_view::npos) {
    return Bad(text, absl::StrCat("a URL scheme ('", text.substr(0, scheme + 3), "') is not allowed: give host:port"));
  }
  Endpoint ep;
  absl::string_view port_text;
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == absl::string_view::npos) return Bad(text, "missing ']'");
    ep.host = std::string(text.substr(1, close - 1));
    absl::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return Bad(text, "expected ':' after ']'");
      port_text = rest.substr(1);
      if (port_text.empty()) return Bad(text, "empty port");
    }
  } else {
    size_t first = text.find(':');
    if (first != absl::string_view::npos && text.find(':', first + 1) != absl::string_view::npos) {
      return Bad(text, "an IPv6 address without brackets is ambiguous");
    }
    if (first == absl::string_view::npos) {
      ep.host = std::string(text);
    } else {
      ep.host = std::string(text.substr(0, first));
      port_text = text.substr(first + 1);
      if (port_text.empty()) return Bad(text, "empty port");
    }
  }
  if (ep.host.empty()) return Bad(text, "empty host");
  if (text.front() == '[' && !absl::StrContains(ep.host, ':')) {
    return Bad(text, absl::StrCat("brackets are for IPv6 addresses, and '", ep.host, "' is not one"));
  }
  if (!HostCharsOk(ep.host, text.front() == '[')) {
    return Bad(text, absl::StrCat("host '", ep.host, "' may only have letters, digits, '.', '-', '_' ",
                                  "(and ':', '%' inside brackets)"));
  }
  if (port_text.empty()) {
    ep.port = default_port;
  } else {
    int port = -1;
    if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535) {
      return Bad(text, absl::StrCat("port '", port_text, "' is not an integer in 0..65535"));
    }
    ep.port = port;
  }
  return ep;
}

}  // namespace meshrun
