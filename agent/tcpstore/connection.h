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
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/tcpstore/tcpstore_server.h"

namespace meshrun::agent::tcpstore {

// The peer's address, "host:port" ("[v6]:port"); "?" when unknown.
std::string PeerName(int fd);

// Bytes counted in a total shared by every connection while this lives
// (move-only): what a Conn::Folded holds, against
// AgentStoreOptions::max_buffered_bytes. Thread-safe across objects.
class HeldBytes {
 public:
  HeldBytes() = default;
  // Counts `n` more in `*total` when that keeps it at most `max`; else an
  // empty one (false), and `*total` is unchanged.
  static HeldBytes Take(std::shared_ptr<std::atomic<int64_t>> total, int64_t max, int64_t n) {
    int64_t now = total->load();
    do {
      if (now + n > max) return {};
    } while (!total->compare_exchange_weak(now, now + n));
    HeldBytes h;
    h.total_ = std::move(total);
    h.n_ = n;
    return h;
  }
  HeldBytes(HeldBytes&& o) noexcept : total_(std::move(o.total_)), n_(std::exchange(o.n_, 0)) {}
  HeldBytes& operator=(HeldBytes&& o) noexcept {
    if (this != &o) {
      Release();
      total_ = std::move(o.total_);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~HeldBytes() { Release(); }
  explicit operator bool() const { return total_ != nullptr; }

 private:
  void Release() {
    if (total_) total_->fetch_sub(n_);
    total_.reset();
    n_ = 0;
  }
  std::shared_ptr<std::atomic<int64_t>> total_;
  int64_t n_ = 0;
};

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
  // A fold's key and value count against max_buffered_bytes, all
  // connections' folds together (a connection may keep one and send
  // nothing more); one that does not fit is not kept, and its GET goes to
  // the store.
  struct Folded {
    std::string key;
    std::string value;
    std::shared_ptr<Store> store;  // Held: its address is not another round's.
    std::shared_ptr<ReadCache> cache;  // The same round's: its generations.
    uint64_t generation = 0;
    HeldBytes held;
  };
  std::optional<Folded> folded ABSL_GUARDED_BY(write_mu);
  // Keeps `f` as the fold when its bytes fit in `*total` within `max`
  // (the one kept before is dropped first); else keeps none.
  void KeepFoldLocked(Folded f, std::shared_ptr<std::atomic<int64_t>> total, int64_t max)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu) {
    folded.reset();
    const int64_t n = static_cast<int64_t>(f.key.size() + f.value.size());
    f.held = HeldBytes::Take(std::move(total), max, n);
    if (f.held) folded = std::move(f);
  }

  const int fd;
  const std::string peer;
  std::thread reader;
  std::atomic<bool> done{false};
  absl::Mutex write_mu;
  bool closed ABSL_GUARDED_BY(write_mu) = false;
  std::list<Waiter> waiters;  // The reader thread's only.
};

}  // namespace meshrun::agent::tcpstore
