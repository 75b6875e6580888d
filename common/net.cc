#include "common/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/checks.h"

namespace meshrun {
namespace {

std::string SockaddrToString(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { if (fd_ >= 0) ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
 private:
  int fd_;
};

}  // namespace

std::optional<PeerParts> SplitPeer(absl::string_view peer) {
  PeerParts parts;
  absl::string_view port;
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    const size_t colon = peer.rfind(':');
    if (colon == absl::string_view::npos) return std::nullopt;
    parts.family = AF_INET;
    parts.address = peer.substr(0, colon);
    port = peer.substr(colon + 1);
  } else if (absl::ConsumePrefix(&peer, "ipv6:")) {
    absl::string_view close;
    if (absl::ConsumePrefix(&peer, "[")) {
      close = "]:";
    } else if (absl::ConsumePrefix(&peer, "%5B")) {
      close = "%5D:";
    } else {
      return std::nullopt;
    }
    const size_t end = peer.rfind(close);
    if (end == absl::string_view::npos) return std::nullopt;
    parts.family = AF_INET6;
    parts.address = peer.substr(0, end);
    port = peer.substr(end + close.size());
  } else {
    return std::nullopt;
  }
  uint32_t number = 0;
  if (parts.address.empty() || !absl::SimpleAtoi(port, &number) || number > 65535) return std::nullopt;
  parts.port = static_cast<uint16_t>(number);
  return parts;
}

absl::StatusOr<std::vector<std::string>> ResolveNumeric(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    return absl::NotFoundError(absl::StrCat("cannot resolve host '", host, "': ", gai_strerror(rc)));
  }
  std::vector<std::string> v4, v6;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    std::string s = SockaddrToString(ai->ai_addr);
    auto& out = ai->ai_family == AF_INET ? v4 : v6;
    if (!s.empty() && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  freeaddrinfo(res);
  v4.insert(v4.end(), v6.begin(), v6.end());
  if (v4.empty()) return absl::NotFoundError(absl::StrCat("host '", host, "' has no address"));
  return v4;
}

absl::StatusOr<std::string> LocalAddressFor(const Endpoint& ep) {
  MESHRUN_ASSIGN_OR_RETURN(std::vector<std::string> addrs, ResolveNumeric(ep.host));
  const std::string& target = addrs.front();
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = absl::StrContains(target, ':') ? AF_INET6 : AF_INET;
  if (family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(static_cast<uint16_t>(ep.port == 0 ? 9 : ep.port));
    inet_pton(AF_INET, target.c_str(), &sin->sin_addr);
    len = sizeof(sockaddr_in);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(static_cast<uint16_t>(ep.port == 0 ? 9 : ep.port));
    inet_pton(AF_INET6, target.c_str(), &sin6->sin6_addr);
    len = sizeof(sockaddr_in6);
  }
  Fd fd(::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return PosixError(errno, "socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    return PosixError(errno, "connect", ep.ToString());
  }
  sockaddr_storage local{};
  socklen_t local_len = sizeof(local);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) {
    return PosixError(errno, "getsockname");
  }
  return SockaddrToString(reinterpret_cast<sockaddr*>(&local));
}

absl::StatusOr<int> FindFreePort(const std::string& addr) {
  int family = absl::StrContains(addr, ':') ? AF_INET6 : AF_INET;
  Fd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return PosixError(errno, "socket");
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    if (inet_pton(AF_INET, addr.c_str(), &sin->sin_addr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("not a numeric address: '", addr, "'"));
    }
    len = sizeof(sockaddr_in);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    if (inet_pton(AF_INET6, addr.c_str(), &sin6->sin6_addr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("not a numeric address: '", addr, "'"));
    }
    len = sizeof(sockaddr_in6);
  }
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    return PosixError(errno, "bind", addr);
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    return PosixError(errno, "getsockname");
  }
  if (bound.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
}

bool PortInUse(const std::string& addr, int port) {
  int family = absl::StrContains(addr, ':') ? AF_INET6 : AF_INET;
  Fd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return false;
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, addr.c_str(), &sin->sin_addr) != 1) return false;
    len = sizeof(sockaddr_in);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, addr.c_str(), &sin6->sin6_addr) != 1) return false;
    len = sizeof(sockaddr_in6);
  }
  return ::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 && errno == EADDRINUSE;
}

bool IsLoopback(const std::string& addr) {
  return absl::StartsWith(addr, "127.") || addr == "::1";
}

bool IsLoopbackName(const std::string& host) {
  return host == "localhost" || host == "localhost.localdomain" || IsLoopback(host);
}

absl::StatusOr<std::string> InterfaceOf(const std::string& addr) {
  ifaddrs* ifa = nullptr;
  if (getifaddrs(&ifa) != 0) return PosixError(errno, "getifaddrs");
  std::string name;
  for (ifaddrs* it = ifa; it != nullptr && name.empty(); it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    if (it->ifa_addr->sa_family != AF_INET && it->ifa_addr->sa_family != AF_INET6) continue;
    if (SockaddrToString(it->ifa_addr) == addr) name = it->ifa_name;
  }
  freeifaddrs(ifa);
  if (name.empty() && IsLoopback(addr)) name = "lo";  // 127.0.1.1 etc. route over lo.
  if (name.empty()) return absl::NotFoundError(absl::StrCat("no network interface here holds address ", addr));
  return name;
}

namespace {

// Connects to `addr`:`port` within `timeout`; returns the local address.
absl::StatusOr<std::string> ConnectOnce(const std::string& addr, int port, absl::Duration timeout) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = absl::StrContains(addr, ':') ? AF_INET6 : AF_INET;
  if (family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, addr.c_str(), &sin->sin_addr);
    len = sizeof(sockaddr_in);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET6, addr.c_str(), &sin6->sin6_addr);
    len = sizeof(sockaddr_in6);
  }
  Fd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return PosixError(errno, "socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    if (errno != EINPROGRESS) return absl::UnavailableError(std::strerror(errno));
    pollfd p{fd.get(), POLLOUT, 0};
    int ms = static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
    int rc = ::poll(&p, 1, ms);
    if (rc == 0) return absl::UnavailableError(absl::StrCat("no answer within ", absl::FormatDuration(timeout)));
    if (rc < 0) return absl::UnavailableError(std::strerror(errno));
    int err = 0;
    socklen_t elen = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
    if (err != 0) return absl::UnavailableError(std::strerror(err));
  }
  sockaddr_storage local{};
  socklen_t local_len = sizeof(local);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) {
    return PosixError(errno, "getsockname");
  }
  return SockaddrToString(reinterpret_cast<sockaddr*>(&local));
}

}  // namespace

absl::StatusOr<TcpRoute> ProbeTcp(const Endpoint& ep, absl::Duration attempt_timeout) {
  MESHRUN_ASSIGN_OR_RETURN(std::vector<std::string> addrs, ResolveNumeric(ep.host));
  std::string errors;
  for (size_t i = 0; i < addrs.size(); ++i) {
    absl::StatusOr<std::string> local = ConnectOnce(addrs[i], ep.port, attempt_timeout);
    if (local.ok()) {
      // A server that came up while the earlier addresses were tried (they
      // were refused a moment ago) is dialed at the preferred one (IPv4
      // first), so every node picks the same family whenever it can.
      for (size_t j = 0; j < i; ++j) {
        absl::StatusOr<std::string> again = ConnectOnce(addrs[j], ep.port, attempt_timeout);
        if (again.ok()) return TcpRoute{addrs[j], *again};
      }
      return TcpRoute{addrs[i], *local};
    }
    absl::StrAppend(&errors, errors.empty() ? "" : "; ", Endpoint{addrs[i], ep.port}.ToString(), ": ",
                    local.status().message());
  }
  return absl::UnavailableError(errors);
}

std::string NumericTarget(const std::string& addr, int port) {
  return absl::StrContains(addr, ':') ? absl::StrCat("ipv6:[", addr, "]:", port)
                                      : absl::StrCat("ipv4:", addr, ":", port);
}

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

bool IsLocalHost(const std::string& host) {
  if (IsLoopbackName(host) || host == Hostname()) return true;
  // A forward lookup (never a reverse one): any of the name's addresses that
  // is loopback or assigned to an interface here makes it this machine.
  absl::StatusOr<std::vector<std::string>> addrs = ResolveNumeric(host);
  if (!addrs.ok()) return false;
  for (const auto& a : *addrs) {
    if (IsLoopback(a)) return true;
  }
  ifaddrs* ifa = nullptr;
  if (getifaddrs(&ifa) != 0) return false;
  bool found = false;
  for (ifaddrs* it = ifa; it != nullptr && !found; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    if (it->ifa_addr->sa_family != AF_INET && it->ifa_addr->sa_family != AF_INET6) continue;
    std::string local = SockaddrToString(it->ifa_addr);
    found = std::find(addrs->begin(), addrs->end(), local) != addrs->end();
  }
  freeifaddrs(ifa);
  return found;
}

}  // namespace meshrun
