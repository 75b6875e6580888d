#include "agent/tcpstore/client.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "agent/tcpstore/protocol.h"

namespace meshrun::agent::tcpstore {
namespace {

// Connects within `deadline`; -1 with `*why` set when it cannot.
int Connect(const std::string& host, int port, absl::Time deadline, std::string* why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = absl::StrCat(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    *why = absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc));
    return -2;
  }
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int ms = static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now())));
      rc = ::poll(&p, 1, std::min(ms, 5000)) == 1 ? 0 : -1;
      int err = 0;
      socklen_t len = sizeof err;
      if (rc == 0 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) {
        errno = err;
        rc = -1;
      } else if (rc != 0) {
        errno = ETIMEDOUT;
      }
    }
    if (rc != 0) {
      *why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd >= 0) ::fcntl(fd, F_SETFL, 0);  // Blocking again; reads are bounded by poll.
  return fd;
}

bool ReadExactly(int fd, char* out, size_t n, absl::Time deadline) {
  size_t got = 0;
  while (got < n) {
    pollfd p{fd, POLLIN, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (ms <= 0 || ::poll(&p, 1, ms) != 1) return false;
    ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> GetKey(const std::string& host, int port, const std::string& key,
                                   absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string why = "no attempt";
  for (int attempt = 0;; ++attempt) {
    int fd = Connect(host, port, deadline, &why);
    if (fd == -2) return absl::NotFoundError(why);
    if (fd >= 0) {
      Request v;
      v.op = Op::kValidate;
      v.nonce = kValidationMagic;
      Request get;
      get.op = Op::kGet;
      get.keys = {key};
      const std::string req = EncodeRequest(v, Dialect::kCurrent) + EncodeRequest(get, Dialect::kCurrent);
      char len_bytes[8];
      std::string value;
      bool ok = ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size()) &&
                ReadExactly(fd, len_bytes, 8, deadline);
      uint64_t n = 0;
      if (ok) {
        std::memcpy(&n, len_bytes, 8);
        ok = n <= 4096;
        value.resize(ok ? n : 0);
        ok = ok && ReadExactly(fd, value.data(), n, deadline);
      }
      ::close(fd);
      if (ok && !value.empty()) return value;
      why = ok ? absl::StrCat("'", key, "' is not set there yet")
               : absl::StrCat("no answer to a TCPStore GET of '", key, "' (not a meshrun agent store, or not ready)");
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("nothing answered at ", host, ":", port, " within ",
                                                      absl::FormatDuration(timeout), " (last: ", why, ")"));
    }
    // Node rank 0 may start later: try again shortly (bounded by the deadline).
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100 * (attempt + 1), 1000)));
  }
}

}  // namespace meshrun::agent::tcpstore
