// The agent store's WAITs and BARRIERs (tcpstore_server.h): each on a
// thread of its own, in slices of the store's waiting, bounded per
// connection and in all, and released by a queue's push (queues.h).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "agent/tcpstore/connection.h"
#include "agent/tcpstore/store_ops.h"
#include "agent/tcpstore/tcpstore_server.h"

namespace meshrun::agent::tcpstore {

bool AgentStore::Barrier(const std::shared_ptr<Conn>& c, const Request& r) {
  std::shared_ptr<Store> store, internal;
  std::shared_ptr<ReadCache> cache;
  {
    absl::MutexLock lock(&mu_);
    store = store_;
    internal = internal_;
    cache = cache_;
  }
  if (!AdmitWait(c, "BARRIER")) return false;
  absl::StatusOr<bool> released = absl::UnavailableError("no round has started on this node yet");
  if (store != nullptr && internal != nullptr) {
    cache->WriteSent({r.keys[0]});  // Its arrival is an ADD to the key.
    released = ArriveAtBarrier(*store, *internal, r);
    cache->WriteAnswered({r.keys[0]}, released.ok());
  }
  if (!released.ok() || *released) EndWait();
  if (!released.ok()) {
    Log(absl::StrCat("agent store: BARRIER '", r.keys[0].substr(0, 128), "' from ", c->peer, ": ",
                     released.status().message(), "; closing the connection"));
    absl::MutexLock lock(&mu_);
    ++stats_.closed_on_error;
    return false;
  }
  if (!*released) {
    // The release key is the agent store's own (internal): no read cache.
    RunWait(c, Round{std::move(internal), nullptr}, {BarrierReleaseKey(r.keys[0], r.number)}, /*queues=*/false);
    return true;
  }
  std::string reply;
  AppendU8(&reply, kStopWaiting);
  return c->Write(reply);
}

bool AgentStore::StartWait(const std::shared_ptr<Conn>& c, const Round& round, std::vector<std::string> keys) {
  const std::shared_ptr<Store>& store = round.store;
  if (store != nullptr && keys.size() == 1 && !queues_.AnyQueue(keys)) {
    // A key already set (most of init_process_group's gets): answered on
    // this thread, its value kept for the GET that follows; no waiter
    // thread. One not set yet (NOT_FOUND), or an error, goes to a waiter.
    // The read holds this connection's thread for one store call: during a
    // leader's failover up to the store's rpc slack (10 s), and a
    // CANCEL_WAIT sent meanwhile is answered after it (PyTorch's client
    // takes a STOP_WAITING before its WAIT_CANCELED).
    // Ranks asking at once share one store call (ReadCache::Read).
    // The fold needs a read with no write of the key in flight (a clean
    // ticket), as a value kept in the cache does.
    const ReadCache::Ticket ticket = round.cache->BeforeRead(keys[0]);  // Before the read is sent.
    ReadCache::Value value = ReadThrough(*store, *round.cache, keys[0]);
    if (value.ok() && value->has_value()) {
      EndWait();
      absl::MutexLock lock(&c->write_mu);
      if (ticket.clean) {
        c->KeepFoldLocked(Conn::Folded{keys[0], std::move(**value), store, round.cache, ticket.generation, HeldBytes{}},
                          folded_bytes_, o_.max_buffered_bytes);
      }
      std::string reply;
      AppendU8(&reply, kStopWaiting);
      return c->WriteLocked(reply);
    }
  }
  RunWait(c, round, std::move(keys), /*queues=*/true);
  return true;
}

bool AgentStore::AdmitWait(const std::shared_ptr<Conn>& c, const char* op) {
  int canceled = 0;
  for (auto it = c->waiters.begin(); it != c->waiters.end();) {
    if (it->finished->load()) {
      it->thread.join();
      it = c->waiters.erase(it);
      continue;
    }
    if (!it->answered->load()) {
      // Still in progress: the client gave up on it (PyTorch 1.x sends no
      // CANCEL_WAIT). Canceled without a reply, as CANCEL_WAIT would.
      absl::MutexLock lock(&c->write_mu);
      it->canceled->store(true);
      c->folded.reset();  // Not this WAIT's read.
    }
    if (it->canceled->load()) ++canceled;
    ++it;
  }
  std::string refused;
  if (canceled >= o_.max_canceled_waits) {
    refused = absl::StrCat(canceled, " canceled WAITs of this connection are still in the store (at most ",
                           o_.max_canceled_waits, ")");
  }
  {
    absl::MutexLock lock(&mu_);
    if (refused.empty() && waits_ >= o_.max_waits) {
      refused = absl::StrCat(waits_, " WAITs are in the store (agent_store_max_waits)");
    }
    if (!refused.empty()) {
      ++stats_.closed_on_error;
    } else {
      ++waits_;
    }
  }
  if (!refused.empty()) {
    Log(absl::StrCat("agent store: ", op, " from ", c->peer, ": ", refused, "; closing the connection"));
    return false;
  }
  return true;
}

void AgentStore::EndWait() {
  absl::MutexLock lock(&mu_);
  --waits_;
}

void AgentStore::RunWait(const std::shared_ptr<Conn>& c, Round round, std::vector<std::string> keys, bool queues) {
  Conn::Waiter w;
  w.canceled = std::make_shared<std::atomic<bool>>(false);
  w.answered = std::make_shared<std::atomic<bool>>(false);
  w.finished = std::make_shared<std::atomic<bool>>(false);
  w.thread = std::thread([this, c, store = std::move(round.store), cache = std::move(round.cache),
                          keys = std::move(keys), queues, canceled = w.canceled,
                          answered = w.answered, finished = w.finished] {
    // A push to the queue of a single key's name answers this WAIT at once.
    auto released = std::make_shared<absl::Notification>();
    const int64_t waiter = queues && keys.size() == 1
                               ? queues_.AddWaiter(keys[0], [c, canceled, answered, released] {
                                   // Never waits for another connection's writer: the
                                   // push goes to the next waiter instead.
                                   if (!c->write_mu.TryLock()) return false;
                                   const bool release = !canceled->load() && !answered->load();
                                   if (release) {
                                     answered->store(true);
                                     canceled->store(true);  // Its thread ends without a reply of its own.
                                     std::string reply;
                                     AppendU8(&reply, kStopWaiting);
                                     c->WriteLocked(reply);
                                   }
                                   c->write_mu.Unlock();
                                   if (release) released->Notify();
                                   return release;
                                 })
                               : -1;
    absl::Status s = store == nullptr ? absl::UnavailableError("no round has started on this node yet")
                                      : absl::OkStatus();
    while (s.ok() && !canceled->load()) {
      std::optional<std::string> value;
      // Before the read is sent (a value comes back only for a client's
      // WAIT on one key: never one of the internal namespace's).
      const ReadCache::Ticket ticket = queues && keys.size() == 1 ? cache->BeforeRead(keys[0]) : ReadCache::Ticket{};
      s = WaitSlice(*store, keys, queues, *released, &value);
      if (absl::IsDeadlineExceeded(s)) {
        s = absl::OkStatus();
        continue;
      }
      if (!s.ok()) break;
      absl::MutexLock lock(&c->write_mu);
      if (!canceled->load()) {
        answered->store(true);
        if (value && ticket.clean) {
          cache->Fill(keys[0], *value, ticket);
          c->KeepFoldLocked(Conn::Folded{keys[0], std::move(*value), store, cache, ticket.generation, HeldBytes{}},
                            folded_bytes_, o_.max_buffered_bytes);
        }
        std::string reply;
        AppendU8(&reply, kStopWaiting);
        c->WriteLocked(reply);
      }
      break;
    }
    if (waiter >= 0) queues_.RemoveWaiter(keys[0], waiter);
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      --waits_;
      stopping = stopping_;
    }
    // At shutdown every WAIT ends so: not worth a line each.
    if (!s.ok() && !canceled->load() && !stopping) {
      Log(absl::StrCat("agent store: WAIT '", keys.empty() ? "" : keys[0].substr(0, 128), "' from ", c->peer, ": ",
                       s.message(), "; closing the connection"));
      ::shutdown(c->fd, SHUT_RDWR);
    }
    finished->store(true);
  });
  c->waiters.push_back(std::move(w));
}

absl::Status AgentStore::WaitSlice(Store& store, const std::vector<std::string>& keys, bool queues,
                                   absl::Notification& released, std::optional<std::string>* value) {
  if (keys.empty()) return absl::OkStatus();
  if (queues && keys.size() == 1 && !queues_.AnyQueue(keys)) {
    // A client's WAIT on one key: the read that waits also brings the value
    // for the GET PyTorch's get() sends next (Conn::Folded).
    absl::StatusOr<std::string> v = store.Get(keys[0], o_.wait_slice);
    if (!v.ok()) return v.status();
    *value = std::move(*v);
    return absl::OkStatus();
  }
  if (!queues || !queues_.AnyQueue(keys)) return store.Wait(keys, o_.wait_slice);
  absl::StatusOr<std::vector<std::string>> rest = queues_.NotHolding(keys);
  if (!rest.ok()) return rest.status();
  if (rest->empty()) return absl::OkStatus();
  if (!queues_.AllQueues(*rest)) return store.Wait(*rest, o_.wait_slice);
  // Every key left names an empty queue: ready when set as a key (seen
  // here) or pushed to (a push releases a single key's WAIT; several keys
  // look again when the slice ends).
  absl::StatusOr<bool> set = store.Check(*rest);
  if (!set.ok()) return set.status();
  if (*set) return absl::OkStatus();
  released.WaitForNotificationWithTimeout(o_.wait_slice);
  return absl::DeadlineExceededError("the slice ended");
}

}  // namespace meshrun::agent::tcpstore
