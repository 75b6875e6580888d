#include "launcher/hosting.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/checks.h"

namespace meshrun::launcher {
namespace {

// An abstract address: sun_path starts with a NUL byte.
socklen_t AbstractAddress(int port, sockaddr_un* addr) {
  *addr = sockaddr_un{};
  addr->sun_family = AF_UNIX;
  const std::string name = absl::StrCat("meshrun-host-", port);
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

// "pid 1234 (meshrun --nnodes=2 ...)" for the process listening on `addr`,
// or a plain phrase when it cannot be found.
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
      std::string cmd;
      std::getline(f, cmd);  // No newline in cmdline; never throws (a gone process reads as empty).
      while (!cmd.empty() && cmd.back() == '\0') cmd.pop_back();
      if (cmd.size() > 120) cmd = cmd.substr(0, 117) + "...";
      if (!cmd.empty()) absl::StrAppend(&who, " (", absl::StrReplaceAll(cmd, {{std::string(1, '\0'), " "}}), ")");
    }
  }
  ::close(fd);
  return who;
}

}  // namespace

absl::StatusOr<HostClaim> HostClaim::Take(int port) {
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(port, &addr);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return PosixError(errno, "socket(AF_UNIX)");
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EADDRINUSE) {
      return absl::AlreadyExistsError(
          absl::StrCat(Holder(addr, len), " in this network namespace already hosts port ", port));
    }
    return PosixError(err, "bind", absl::StrCat("@meshrun-host-", port));
  }
  // Listening lets a later claimant ask who holds it (SO_PEERCRED).
  if (::listen(fd, 4) != 0) {
    const int err = errno;
    ::close(fd);
    return PosixError(err, "listen", absl::StrCat("@meshrun-host-", port));
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
