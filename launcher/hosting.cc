#include "launcher/hosting.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <fstream>
#include <iterator>
#include <vector>
#include <utility>

#include "absl/strings/numbers.h"
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

// The inode of the socket bound to abstract `name` in this network
// namespace (/proc/net/unix), 0 when none is.
uint64_t AbstractSocketInode(const std::string& name) {
  std::ifstream f("/proc/net/unix");
  std::string line;
  std::getline(f, line);  // Header.
  const std::string path = "@" + name;
  for (int n = 0; n < 1000000 && std::getline(f, line); ++n) {  // Bounded: the namespace's sockets.
    std::vector<absl::string_view> cols = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (cols.size() < 8 || cols[7] != path) continue;
    uint64_t inode = 0;
    if (absl::SimpleAtoi(cols[6], &inode)) return inode;
  }
  return 0;
}

// Whether a process of this namespace holds abstract `name`. Read from
// /proc/net/unix: no connection is made (a holder never accepts, so
// connections would queue on it until its backlog filled and a later
// connect blocked) and nothing is bound (a probe's bind would, for a
// moment, look like a holder to a meshrun starting beside it).
bool Held(const std::string& name) { return AbstractSocketInode(name) != 0; }

// The pid of a process with `inode`'s socket open, 0 when none is found
// (another user's process, or gone). O(processes x their descriptors).
pid_t SocketOwner(uint64_t inode) {
  const std::string target = absl::StrCat("socket:[", inode, "]");
  std::error_code ec;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(proc.path().filename().string(), &pid)) continue;
    std::error_code fd_ec;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      if (std::filesystem::read_symlink(fd.path(), link_ec).string() == target) return pid;
    }
  }
  return 0;
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

// "pid 1234 (meshrun --nnodes=2 ..., run 'job1')" for the process holding
// abstract `name`, or a plain phrase when it cannot be found.
std::string Holder(const std::string& name) {
  const uint64_t inode = AbstractSocketInode(name);
  const pid_t pid = inode == 0 ? 0 : SocketOwner(inode);
  if (pid <= 0) return "another process";
  std::string who = absl::StrCat("pid ", pid);
  std::ifstream f(absl::StrCat("/proc/", pid, "/cmdline"));
  std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());  // A gone process reads as empty.
  while (!cmd.empty() && cmd.back() == '\0') cmd.pop_back();
  std::vector<std::string> args = absl::StrSplit(cmd, '\0');
  const std::string run_id = RunIdOf(args);
  std::string shown = absl::StrJoin(args, " ");
  if (shown.size() > 120) shown = shown.substr(0, 117) + "...";
  if (!cmd.empty()) {
    absl::StrAppend(&who, " (", shown, run_id.empty() ? "" : absl::StrCat(", run '", run_id, "'"), ")");
  }
  return who;
}

}  // namespace

absl::StatusOr<HostClaim> HostClaim::Take(int port, absl::string_view host) {
  const std::string where = IsAnyAddress(host) ? absl::StrCat("port ", port)
                                               : absl::StrCat("port ", port, " on ", host);
  if (!IsAnyAddress(host)) {
    // A server on every address serves this one too.
    if (Held(ClaimName(port, ""))) {
      return absl::AlreadyExistsError(
          absl::StrCat(Holder(ClaimName(port, "")), " in this network namespace already hosts port ", port,
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
      return absl::AlreadyExistsError(absl::StrCat(Holder(name), " in this network namespace already hosts ", where));
    }
    return PosixError(err, "bind", absl::StrCat("@", name));
  }
  // Bound, not listening: a later claimant finds the holder through
  // /proc/net/unix and /proc/<pid>/fd, without connecting.
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
