// The agent store's connection (tcpstore_server.h's Conn): private to
// agent/tcpstore's implementation files, shared by the one that serves
// requests (tcpstore_server.cc) and the one that runs WAITs (waits.cc).
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/tcpstore/tcpstore_server.h"

namespace meshrun::agent::tcpstore {

// The peer's address, "host:port" ("[v6]:port"); "?" when unknown.
std::string PeerName(int fd);

// One client connection. The reader thread owns the parser and the waiters;
// writes (the reader's replies, a waiter's STOP_WAITING) go under write_mu.
struct AgentStore::Conn {
  explicit Conn(int fd) : fd(fd), peer(PeerName(fd)) {}
  ~Conn() { ::close(fd); }

  // Sends all of `bytes`; false once the connection is closed or broken.
  bool WriteLocked(const std::string& bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu) {
    if (closed) return false;
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  bool Write(const std::string& bytes) {
    absl::MutexLock lock(&write_mu);
    return WriteLocked(bytes);
  }

  struct Waiter {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> canceled;
    // Set before its STOP_WAITING is written: the client may send its next
    // WAIT before this waiter's thread has ended.
    std::shared_ptr<std::atomic<bool>> answered;
    std::shared_ptr<std::atomic<bool>> finished;
  };

  // The value a client's single-key WAIT read (its waiter reads the key
  // with Get rather than Wait), for the GET that PyTorch's client sends
  // right after it as the second half of one get(): that GET is answered
  // with it, without a store call, when it is the connection's next
  // request, for the same key of the same round's store, and no write to
  // the key went through this agent store since the read was sent, nor was
  // in flight then
  // (ReadCache::Generation): then the store holds that value still
  // (the clients' keys are written through node rank 0's agent store,
  // where every worker's MASTER_ADDR:MASTER_PORT points; a write that
  // reaches a key another way between a get()'s WAIT and its GET is not
  // seen by that GET, whose answer was still the key's value during that
  // get(), all a get() promises). So a get() of a key already set costs
  // one store call; one that waited for a write through this agent store
  // does not fold (that write came after the read was sent) and costs two,
  // as before. Any other request drops it.
  struct Folded {
    std::string key;
    std::string value;
    std::shared_ptr<Store> store;  // Held: its address is not another round's.
    std::shared_ptr<ReadCache> cache;  // The same round's: its generations.
    uint64_t generation = 0;
  };
  std::optional<Folded> folded ABSL_GUARDED_BY(write_mu);

  const int fd;
  const std::string peer;
  std::thread reader;
  std::atomic<bool> done{false};
  absl::Mutex write_mu;
  bool closed ABSL_GUARDED_BY(write_mu) = false;
  std::list<Waiter> waiters;  // The reader thread's only.
};

}  // namespace meshrun::agent::tcpstore
