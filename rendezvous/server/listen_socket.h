// The server's own listening sockets, seen from the kernel's side: which
// descriptors of this process listen on a port, how many connections wait
// in their accept queue, and how to stop one. gRPC owns these descriptors;
// these helpers only look at them, or shut one down (never close it, so
// gRPC's later close cannot hit a reused number). Linux only; no gRPC.
#pragma once

#include <cstdint>
#include <vector>

namespace meshrun::rendezvous {

// The descriptors of this process that are TCP sockets listening on
// `port` (IPv4 or IPv6). O(open descriptors): reads /proc/self/fd.
// Thread-safe.
std::vector<int> ListeningSockets(int port);

// True when `fd` is a TCP socket listening on `port`. O(1). Thread-safe.
bool IsListeningOn(int fd, int port);

// Connections waiting in `fd`'s accept queue (completed by the kernel, not
// yet accepted by the program): tcp_info's tcpi_unacked on a listening
// socket. -1 when `fd` is not a listening TCP socket. O(1). Thread-safe.
int64_t AcceptQueueLength(int fd);

// Stops `fd` listening (shutdown(2)): the connections in its queue are
// reset, and the port may be bound again (by a socket with SO_REUSEADDR,
// as gRPC's are); the descriptor stays open for its owner to close.
// Thread-safe.
void StopListening(int fd);

}  // namespace meshrun::rendezvous
