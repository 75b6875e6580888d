#include "rendezvous/server/listen_socket.h"

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>

namespace meshrun::rendezvous {
namespace {

int LocalPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return -1;
}

}  // namespace

bool IsListeningOn(int fd, int port) {
  int listening = 0;
  int protocol = 0;
  socklen_t len = sizeof(listening);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening == 0) return false;
  len = sizeof(protocol);
  if (::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0 || protocol != IPPROTO_TCP) return false;
  return LocalPort(fd) == port;
}

std::vector<int> ListeningSockets(int port) {
  std::vector<int> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  const int own = ::dirfd(dir);
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == own) continue;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (IsListeningOn(fd, port)) out.push_back(fd);
  }
  ::closedir(dir);
  return out;
}

int64_t AcceptQueueLength(int fd) {
  int listening = 0;
  socklen_t len = sizeof(listening);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening == 0) return -1;
  tcp_info info{};
  len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return -1;
  // For a listening socket Linux reports the accept queue's length here
  // (and its capacity in tcpi_sacked).
  return static_cast<int64_t>(info.tcpi_unacked);
}

void StopListening(int fd) { ::shutdown(fd, SHUT_RDWR); }

}  // namespace meshrun::rendezvous
