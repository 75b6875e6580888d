#include "common/http_text_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace meshrun {
namespace {

void SendAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // Timeout or a closed peer: give up on this one.
    off += static_cast<size_t>(n);
  }
}

std::string Response(int code, const char* reason, const std::string& type, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpTextServer>> HttpTextServer::Start(const std::string& host, int port,
                                                                      std::string path, std::string content_type,
                                                                      std::function<std::string()> render,
                                                                      absl::Duration io_timeout) {
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("port ", port, " is outside 0..65535"));
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("metrics host '", host, "' is not a numeric address"));
  }
  std::unique_ptr<HttpTextServer> s(new HttpTextServer());
  s->listen_fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound = s->listen_fd_ >= 0 && ::bind(s->listen_fd_, res->ai_addr, res->ai_addrlen) == 0 &&
                     ::listen(s->listen_fd_, 16) == 0;
  const int err = errno;
  ::freeaddrinfo(res);
  if (!bound) {
    return absl::AlreadyExistsError(
        absl::StrCat("cannot serve metrics on ", host, ":", port, ": ", std::strerror(err)));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  s->port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  s->stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
  s->path_ = std::move(path);
  s->content_type_ = std::move(content_type);
  s->render_ = std::move(render);
  s->io_timeout_ = io_timeout;
  s->thread_ = std::thread([raw = s.get()] { raw->Loop(); });
  return s;
}

HttpTextServer::~HttpTextServer() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    ssize_t unused = ::write(stop_fd_, &one, sizeof(one));
    (void)unused;
    thread_.join();
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

void HttpTextServer::Loop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors (or buffers): the connection stays queued and
      // poll would report it again at once. Wait a little (or for stop)
      // rather than spin; it is accepted once descriptors are free.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        pollfd stop = {stop_fd_, POLLIN, 0};
        ::poll(&stop, 1, 100);
      }
      continue;
    }
    Serve(fd);
    ::close(fd);
  }
}

void HttpTextServer::Serve(int fd) {
  timeval tv = absl::ToTimeval(io_timeout_);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string req;
  char buf[2048];
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < 8192) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    req.append(buf, static_cast<size_t>(n));
  }
  size_t eol = req.find("\r\n");
  if (eol == std::string::npos) {
    SendAll(fd, Response(400, "Bad Request", "text/plain", "bad request\n"));
    return;
  }
  std::vector<std::string> parts = absl::StrSplit(req.substr(0, eol), ' ');
  if (parts.size() != 3) {
    SendAll(fd, Response(400, "Bad Request", "text/plain", "bad request\n"));
    return;
  }
  if (parts[0] != "GET") {
    SendAll(fd, Response(405, "Method Not Allowed", "text/plain", "only GET\n"));
    return;
  }
  std::string target = parts[1].substr(0, parts[1].find('?'));
  if (target != path_) {
    SendAll(fd, Response(404, "Not Found", "text/plain", absl::StrCat("not found; try ", path_, "\n")));
    return;
  }
  SendAll(fd, Response(200, "OK", content_type_, render_()));
}

}  // namespace meshrun
