// ReadCache: the values that reads through the agent store found set, so
// that the next reads of the same keys (a GET, a WAIT, a CHECK, a
// MULTI_GET) are answered without a store call, and reads of one key that
// meet in flight share one store call (Read). In a PyTorch job every rank
// reads every other rank's key (Gloo's full-mesh rendezvous, NCCL's unique
// id), the ranks in the same order: with the cache each key costs the
// rendezvous server about one read, not one per rank.
//
// The contract it rests on: the keys of a round's agent store are written
// only through this agent store (node rank 0's, where every worker's
// MASTER_ADDR:MASTER_PORT points, as torchrun's agent store is the only
// one). A write that reaches one of them another way (meshrun's store API
// on "torch/<key>", another node's agent store) is not seen by the reads
// the cache answers, until a write through this agent store to that key.
//
// What it guarantees under that contract: every answer it gives is the
// key's value in the store at the moment it is given (linearizable), and no
// write is lost (writes always go to the store, never to the cache). A
// value read is kept only when no write to its key was in flight through
// the agent store while it was read; a write drops the key's value when it
// is sent and again when it is answered, so no value outlives a write. A
// write answered with an error may still land later (a deadline passed on
// the client's side only; a write the node's proxy sends again to the next
// leader): its stripe keeps no value for the rest of the round. Keys are tracked in stripes (by hash): a write
// to another key of the same stripe only keeps a value from being kept.
//
// One per round (AgentStore::SetStore makes a new one): keys of other
// rounds are never in it. Bounded by bytes; past the bound it empties and
// fills again. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace meshrun::agent::tcpstore {

class ReadCache {
 public:
  // `max_bytes`: keys and values held at once (each key counts its key's
  // and value's bytes plus kEntryOverhead). 0: nothing is kept (every read
  // goes to the store); generations are still counted.
  explicit ReadCache(int64_t max_bytes) : max_bytes_(max_bytes) {}

  // Bytes counted per key held, beyond its key and value.
  static constexpr int64_t kEntryOverhead = 64;

  // Taken just before a read of `key` is sent to the store.
  struct Ticket {
    uint64_t generation = 0;
    bool clean = false;  // No write of the key's stripe was in flight.
  };
  Ticket BeforeRead(const std::string& key) const;

  // Keeps `value` as `key`'s, read from the store after `t` was taken:
  // only when no write of the key's stripe was in flight when `t` was
  // taken and none was sent or answered since. Whether it was kept.
  bool Fill(const std::string& key, std::string value, Ticket t);

  // What a read of one key gives: its value, nullopt when it is not set.
  using Value = absl::StatusOr<std::optional<std::string>>;
  // A read of `key`: its value when held, else `read()` (a store call)'s,
  // kept when Fill allows. Reads of a key that meet in flight share one
  // store call: a read that finds another's in flight waits for it (at
  // most kMaxSharedWait) and then looks again; when that one's value
  // was not kept (a write came in between, or the key is not set), it
  // reads on its own. So the ranks that ask for a key at once cost one
  // store call, not one each. `read` is called on this thread.
  Value Read(const std::string& key, const std::function<Value()>& read);
  static constexpr absl::Duration kMaxSharedWait = absl::Seconds(30);

  // `key`'s value when it is held.
  std::optional<std::string> Get(const std::string& key) const;
  // Every key's value, in order, when every one is held; nullopt otherwise.
  std::optional<std::vector<std::string>> GetAll(const std::vector<std::string>& keys) const;

  // A write to `keys` (SET, COMPARE_SET, ADD, APPEND, MULTI_SET, DELETE,
  // a BARRIER's arrival) is about to be sent to the store: drops their
  // values and holds their stripes' values out until WriteAnswered(keys).
  void WriteSent(const std::vector<std::string>& keys);
  // That write's answer came: drops the keys' values again. `ok`: it was
  // applied. When not, its outcome is unknown (it may land later), and its
  // stripes stay as if it were in flight: they keep no value from now on.
  void WriteAnswered(const std::vector<std::string>& keys, bool ok);

  // Counts every write sent or answered in `key`'s stripe: a read's value
  // is still the key's when it did not move since the read was sent
  // (Conn::Folded's test). Never goes back.
  uint64_t Generation(const std::string& key) const;

  struct Stats {
    int64_t keys = 0;     // Held now.
    int64_t bytes = 0;    // Held now, against max_bytes.
    int64_t fills = 0;    // Values kept.
    int64_t flushes = 0;  // Times it emptied at max_bytes.
    int64_t shared_reads = 0;  // Reads that waited for another's store call (Read).
  };
  Stats stats() const;

 private:
  static constexpr size_t kStripes = 1024;
  struct Stripe {
    uint64_t generation = 0;
    int64_t in_flight = 0;  // Writes sent and not answered yet.
  };
  static size_t StripeOf(const std::string& key);
  void DropLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::array<Stripe, kStripes> stripes_ ABSL_GUARDED_BY(mu_){};
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  // Keys whose read is in flight (Read), each notified once that read's
  // value was kept or not.
  absl::flat_hash_map<std::string, std::shared_ptr<absl::Notification>> in_flight_reads_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshrun::agent::tcpstore
