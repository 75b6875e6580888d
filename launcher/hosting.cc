#include "launcher/hosting.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/checks.h"

namespace meshrun::launcher {
namespace {

bool IsAnyAddress(absl::string_view host) { return host.empty() || host == "::" || host == "0.0.0.0"; }

// The claim's name: "meshrun-host-<port>" for every address,
// "meshrun-host-<port>-<address>" for one.
std::string ClaimName(int port, absl::string_view host) {
  return IsAnyAddress(host) ? absl::StrCat("meshrun-host-", port) : absl::StrCat("meshrun-host-", port, "-", host);
}

// An abstract address: sun_path starts with a NUL byte.
socklen_t AbstractAddress(const std::string& name, sockaddr_un* addr) {
  *addr = sockaddr_un{};
  addr->sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(addr->sun_path) - 1);
  std::memcpy(addr->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

// Whether a process of this namespace listens on the abstract address.
bool Held(const sockaddr_un& addr, socklen_t len) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool held = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0;
  ::close(fd);
  return held;
}

// The run id a meshrun command line names (--rdzv_id=X, --rdzv-id X, ...),
// "" when it names none.
std::string RunIdOf(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    for (const char* flag : {"--rdzv_id", "--rdzv-id"}) {
      const std::string with_value = absl::StrCat(flag, "=");
      if (args[i].rfind(with_value, 0) == 0) return args[i].substr(with_value.size());
      if (args[i] == flag && i + 1 < args.size()) return args[i + 1];
    }
  }
  return "";
}

// "pid 1234 (meshrun --nnodes=2 ..., run 'job1')" for the process listening
// on `addr`, or a plain phrase when it cannot be found.
std::string Holder(const sockaddr_un& addr, socklen_t len) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "another process";
  std::string who = "another process";
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
    ucred cred{};
    socklen_t clen = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0 && cred.pid > 0) {
      who = absl::StrCat("pid ", cred.pid);
      std::ifstream f(absl::StrCat("/proc/", cred.pid, "/cmdline"));
      std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());  // A gone process reads as empty.
      while (!cmd.empty() && cmd.back() == '\0') cmd.pop_back();
      std::vector<std::string> args = absl::StrSplit(cmd, '\0');
      const std::string run_id = RunIdOf(args);
      std::string shown = absl::StrJoin(args, " ");
      if (shown.size() > 120) shown = shown.substr(0, 117) + "...";
      if (!cmd.empty()) {
        absl::StrAppend(&who, " (", shown, run_id.empty() ? "" : absl::StrCat(", run '", run_id, "'"), ")");
      }
    }
  }
  ::close(fd);
  return who;
}

}  // namespace

absl::StatusOr<HostClaim> HostClaim::Take(int port, absl::string_view host) {
  const std::string where = IsAnyAddress(host) ? absl::StrCat("port ", port)
                                               : absl::StrCat("port ", port, " on ", host);
  if (!IsAnyAddress(host)) {
    // A server on every address serves this one too.
    sockaddr_un any;
    const socklen_t any_len = AbstractAddress(ClaimName(port, ""), &any);
    if (Held(any, any_len)) {
      return absl::AlreadyExistsError(
          absl::StrCat(Holder(any, any_len), " in this network namespace already hosts port ", port,
                       " on every address"));
    }
  }
  const std::string name = ClaimName(port, host);
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(name, &addr);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return PosixError(errno, "socket(AF_UNIX)");
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EADDRINUSE) {
      return absl::AlreadyExistsError(absl::StrCat(Holder(addr, len), " in this network namespace already hosts ", where));
    }
    return PosixError(err, "bind", absl::StrCat("@", name));
  }
  // Listening lets a later claimant ask who holds it (SO_PEERCRED).
  if (::listen(fd, 4) != 0) {
    const int err = errno;
    ::close(fd);
    return PosixError(err, "listen", absl::StrCat("@", name));
  }
  return HostClaim(fd);
}

HostClaim::HostClaim(HostClaim&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

HostClaim& HostClaim::operator=(HostClaim&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

HostClaim::~HostClaim() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace meshrun::launcher
