// torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True): a TCP port
// that speaks PyTorch's TCPStore protocol (protocol.h) and keeps every key in
// meshrun's store (store_ops.h), so a PyTorch program's
// init_process_group("env://") and its own TCPStore clients use meshrun's
// store (its replicas, its limits, its node proxy) and worker rank 0 opens no
// listening socket. Node rank 0's agent serves it on MASTER_ADDR:MASTER_PORT,
// as torchrun's agent does (docs/worker-environment.md).
//
// Reads of keys already set are answered from a read cache of the round's
// values (read_cache.h: its contract, that the round's keys are written
// through this agent store only) when they can be, without a store call.
//
// One thread per connection, and one per WAIT in progress. A WAIT waits in
// the store in slices of `wait_slice`, so that CANCEL_WAIT (a client's wait
// timing out) is answered at once and a canceled wait holds the store for at
// most one more slice. Queues (queues.h) live in the store's internal
// namespace: a WAIT on one key is released by a push to the queue of that
// name at once (a blocking queue_pop), as does a SET (MULTI_SET, ADD,
// APPEND) of that name as a key; a WAIT on several keys that names a queue
// sees its pushes when its slice ends, as does a single key's WAIT a
// COMPARE_SET that sets it. A request the store refuses, or one this server does
// not serve, closes its connection (the protocol has no error reply) with
// one log line naming the request, the key and why.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "agent/tcpstore/protocol.h"
#include "agent/tcpstore/queues.h"
#include "agent/tcpstore/read_cache.h"
#include "common/store.h"

namespace meshrun::agent::tcpstore {

// The key under which node rank 0's agent store names the port of the
// rendezvous server it hosts, with the static backend (whose --master_port
// is the agent store's, as under torchrun).
inline constexpr char kRendezvousPortKey[] = "meshrun/rendezvous_port";

// Where the agent's workers' TCPStore keys live in meshrun's store: key K is
// "torch/K" there. The agent store has no authentication (nor has
// PyTorch's TCPStore), so its clients reach only these keys, never
// libmesh's ("mesh/") or any other client's.
inline constexpr char kAgentStorePrefix[] = "torch";
// The agent store's own keys (BARRIER's releases), in meshrun's store under
// this prefix: apart from its clients' keys, so that no client can set one.
inline constexpr char kAgentStoreInternalPrefix[] = "torch-internal";

struct AgentStoreOptions {
  // Numeric address to listen on; empty: every address (IPv6 and IPv4 when
  // the host has IPv6, else IPv4), as PyTorch's TCPStore server listens.
  std::string bind_addr;
  // 0: a free port (read it from port()).
  int port = 0;
  Limits limits;
  // Connections served at once (rdzv_conf agent_store_max_connections); one
  // past it is closed at once, with a log line. Each costs a thread.
  int max_connections = 4096;
  // Bytes of requests not yet complete, all connections together
  // (rdzv_conf agent_store_max_buffered_bytes): a connection whose next
  // read would pass it is closed, with a log line. Each connection alone is
  // bounded by limits.max_request_bytes. Apart from them, the values that
  // single-key WAITs keep for the GET that follows (Conn::Folded) are
  // bounded by it too, all connections together: past it, none is kept.
  int64_t max_buffered_bytes = int64_t{512} << 20;
  // A WAIT's slice of waiting in the store (see above).
  absl::Duration wait_slice = absl::Seconds(5);
  // Canceled waits still in their last slice, per connection; a WAIT past
  // it closes the connection. A WAIT while the connection's last one is in
  // progress cancels that one, without a reply (PyTorch 1.x's client sends
  // no CANCEL_WAIT when its wait times out: it just sends its next request).
  int max_canceled_waits = 64;
  // WAITs in the store at once, all connections together, canceled ones
  // still in their slice included (rdzv_conf agent_store_max_waits): each
  // costs a thread and a call parked in the store. A WAIT past it closes its
  // connection, with a log line. (About 1,600 made the agent miss its
  // server's heartbeat in an attack; cause not found: docs/performance.md.)
  int max_waits = 1024;
  // Keys one LIST_KEYS may answer (rdzv_conf agent_store_max_listed_keys):
  // when more are set, the LIST_KEYS closes its connection, with a log line
  // naming both numbers. A reply holds up to this many keys of up to the
  // server's max_key_bytes (1 KiB) each.
  int64_t max_listed_keys = 32768;
  // Bytes of keys and values the read cache (read_cache.h) holds for the
  // round (rdzv_conf agent_store_read_cache_bytes); 0 turns it off: every
  // read goes to meshrun's store (but a get()'s GET folded into its WAIT,
  // Conn::Folded), and a write made to the round's keys another way is
  // seen by the next one.
  int64_t read_cache_bytes = int64_t{64} << 20;
  // Where the one-line reports go (a closed connection and why); may be empty.
  std::function<void(const std::string&)> log;
};

class AgentStore {
 public:
  // Listens and serves. UNAVAILABLE naming the address and port (and the
  // system's error) when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<AgentStore>> Start(AgentStoreOptions options);
  // Stops listening, closes every connection and waits for its threads
  // (a WAIT in the store: until its slice ends or the store's call fails).
  ~AgentStore();

  AgentStore(const AgentStore&) = delete;
  AgentStore& operator=(const AgentStore&) = delete;

  // Closes every connection and refuses new ones; WAITs still in the store
  // end quietly (no log line each). The destructor then waits for them.
  // Thread-safe; idempotent.
  void Stop();

  // The port it listens on.
  int port() const { return port_; }

  // The store requests go to from now on (the round's: keys of other rounds
  // are invisible in it), and `internal`, where the agent store keeps keys
  // of its own (BARRIER's releases): the same round's, apart from `store`'s
  // keys (kAgentStoreInternalPrefix). Until the first call, a connection's
  // first request other than VALIDATE/PING closes it. `read_cache`: reads
  // of the round are answered from a new read cache (read_cache.h) when
  // they can be; give it only where this agent store is the one the
  // round's workers use (node rank 0's), as its contract asks. Thread-safe.
  void SetStore(std::shared_ptr<Store> store, std::shared_ptr<Store> internal, bool read_cache = true);

  // Answers GET `key` with `value` from now on, without the store: how a
  // static-backend node finds the rendezvous server's port on node rank 0
  // (kRendezvousPortKey). Thread-safe.
  void SetLocalKey(std::string key, std::string value);

  struct Stats {
    int64_t accepted = 0;   // Connections accepted.
    int64_t open = 0;       // Connections open now.
    int64_t refused = 0;    // Closed at once: past max_connections.
    int64_t requests = 0;   // Requests served.
    int64_t closed_on_error = 0;
    int64_t buffered_bytes = 0;  // Now, all connections (see max_buffered_bytes).
    int64_t waits = 0;           // WAITs in the store now (see max_waits).
    // Single-key WAITs a QUEUE_PUSH to their key's name can release now
    // (a push releases the oldest registered first; queues.h). A WAIT
    // counts in `waits` from its arrival and here only once its waiter
    // thread has registered it.
    int64_t push_waiters = 0;
    // GETs answered with the value their WAIT read (Conn::Folded): a
    // PyTorch get() costs one store call, not two.
    int64_t folded_gets = 0;
    // Bytes the folds hold now, all connections (see max_buffered_bytes).
    int64_t folded_bytes = 0;
    // Requests answered from the read cache (GET, WAIT, CHECK, MULTI_GET),
    // and the current round's cache (read_cache.h).
    int64_t cached_reads = 0;
    ReadCache::Stats cache;
  };
  Stats stats() const;

 private:
  struct Conn;
  // The round's store and its read cache (SetStore's); null before the first.
  struct Round {
    std::shared_ptr<Store> store;
    std::shared_ptr<ReadCache> cache;
  };
  explicit AgentStore(AgentStoreOptions options) : o_(std::move(options)) {}
  void AcceptLoop();
  void Serve(const std::shared_ptr<Conn>& c);
  // Handles one request; false when the connection must close.
  bool Handle(const std::shared_ptr<Conn>& c, Request r);
  // Starts a WAIT that AdmitWait counted (the round's, `round`): a single
  // key already set is answered at once (its value kept for the GET that
  // follows, Conn::Folded, and in the read cache), else a waiter thread
  // waits. Whether the connection stays open.
  bool StartWait(const std::shared_ptr<Conn>& c, const Round& round, std::vector<std::string> keys);
  // The bounds of a WAIT (or BARRIER, `op`) about to start on `c`: true and
  // one WAIT counted in all (RunWait's end, or EndWait, takes it back);
  // false (and a log line) when the connection must close.
  bool AdmitWait(const std::shared_ptr<Conn>& c, const char* op);
  // Takes back a WAIT that AdmitWait counted and that did not run.
  void EndWait();
  // Waits in `round.store` for `keys` on a thread of its own (one
  // AdmitWait counted), then answers STOP_WAITING. With `queues`, a key is
  // ready also when the queue of its name holds an item (a client's WAIT),
  // and a single key's value read is kept in `round.cache`.
  void RunWait(const std::shared_ptr<Conn>& c, Round round, std::vector<std::string> keys, bool queues);
  // One slice of a WAIT (RunWait's): OK once every key is ready,
  // DEADLINE_EXCEEDED when the slice ended first (or `released` was
  // notified: a push answered this WAIT); the store's errors. A client's
  // WAIT on one key that names no queue reads the key (Get) and sets
  // `*value` to what it read, for the GET that follows (Conn::Folded).
  absl::Status WaitSlice(Store& store, const std::vector<std::string>& keys, bool queues,
                         absl::Notification& released, std::optional<std::string>* value);
  Round CurrentRound();
  // GET, WAIT, CHECK and MULTI_GET of keys the read cache holds: answered
  // from it (whether the connection stays open); nullopt when a key is not
  // held (the request goes on as without it).
  std::optional<bool> AnswerCached(const std::shared_ptr<Conn>& c, const Request& r, ReadCache& cache);
  // The reply to `r` in `round` (empty for a request with none): queues',
  // PING's, a GET's through the read cache, else store_ops' Execute (a
  // write bracketed by the read cache's WriteSent and WriteAnswered).
  // Refusals: no round yet (UNAVAILABLE), NotServed, the store's errors.
  absl::StatusOr<std::string> Reply(const Request& r, const Round& round);
  // A read of `key` through `cache` (ReadCache::Read) from `store`: its
  // value, nullopt when it is not set; the store's errors.
  ReadCache::Value ReadThrough(Store& store, ReadCache& cache, const std::string& key);
  // A GET that is the connection's next request after its WAIT: answered
  // with the WAIT's read when it may be (Conn::Folded): whether the
  // connection stays open; nullopt when it must go to the store. Every
  // request drops the connection's fold.
  std::optional<bool> AnswerFolded(const std::shared_ptr<Conn>& c, const Request& r);
  // QUEUE_PUSH, QUEUE_POP, QUEUE_LEN and a CHECK that names a queue: the
  // reply's bytes (empty for QUEUE_PUSH); Queues' and the store's errors.
  absl::StatusOr<std::string> QueueRequest(const Request& r);
  // BARRIER (store_ops.h's ArriveAtBarrier): admitted as a WAIT first, so a
  // refused one is not counted as an arrival; STOP_WAITING at once for an
  // arrival that releases it, else a WAIT for its release; false (and a log
  // line) when the connection must close.
  bool Barrier(const std::shared_ptr<Conn>& c, const Request& r);
  void Log(const std::string& line);
  std::shared_ptr<Store> CurrentStore();
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AgentStoreOptions o_;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};
  int port_ = 0;
  std::thread accept_thread_;
  mutable absl::Mutex mu_;
  std::shared_ptr<Store> store_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Store> internal_ ABSL_GUARDED_BY(mu_);  // SetStore's `internal`.
  std::shared_ptr<ReadCache> cache_ ABSL_GUARDED_BY(mu_);  // The round's (SetStore).
  Queues queues_;  // In `internal_`.
  std::map<std::string, std::string> local_keys_ ABSL_GUARDED_BY(mu_);
  std::list<std::shared_ptr<Conn>> conns_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Connections served now: counted down before a closing connection's
  // socket is shut, so whoever sees the close sees the count already down.
  int open_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t buffered_ ABSL_GUARDED_BY(mu_) = 0;  // Against max_buffered_bytes.
  // What the connections' folds hold (Conn::Folded), against
  // max_buffered_bytes apart from buffered_. Shared: a fold may outlive
  // its connection's thread.
  const std::shared_ptr<std::atomic<int64_t>> folded_bytes_ = std::make_shared<std::atomic<int64_t>>(0);
  int waits_ ABSL_GUARDED_BY(mu_) = 0;         // Waiter threads alive, against max_waits.
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshrun::agent::tcpstore
