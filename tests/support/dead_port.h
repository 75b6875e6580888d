// A server address that is gone, for tests of what follows a lost leader:
// a loopback port nobody listens on, and channel settings that reconnect to
// it quickly once something listens there.
#pragma once

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace meshrun::testing {

// A loopback port nobody listens on (bound, then closed), as a server gone
// away; -1 when no port could be had.
inline int DeadPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  return ok ? static_cast<int>(ntohs(a.sin_port)) : -1;
}

// Reconnect within about 100 ms (gRPC's default back-off starts at 1 s).
inline grpc::ChannelArguments FastReconnect() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  return args;
}

}  // namespace meshrun::testing
