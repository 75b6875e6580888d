// The runs' durable state in etcd (rendezvous/run/journal.h's RunJournal):
// each run's record at <prefix>/runs/<run id>, a fenced write of the leader
// (one per durable change: one per closed round; a store-only run's with
// its first keys; a record too big for one etcd request is kept in parts
// under "<runs prefix without its '/'>.parts/", record_parts.h); the runs'
// store keys at <prefix>/kv/<run id in
// hex>/<incarnation, 16 hex digits>/<round, 20 digits>/<key>, the value as
// it is (any bytes). Every write goes through Election::FencedTxn: a
// replica that no longer leads writes nothing. Removals (Drop) are queued
// and done on a thread of the journal's own while its replica leads, tried
// again until they are done: the registry's sweep runs on the server's
// timer thread, which must not wait for etcd. Store writes (SaveKeysAsync)
// and DropKeysBelow go through the journal's group-commit writer
// (store_writer.h): queued in order, many to a transaction; Load stops it
// while it reads and takes writes again once loaded. Load drops keys of no
// record. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "rendezvous/state/etcd/election.h"
#include "rendezvous/state/etcd/store_writer.h"
#include "rendezvous/state/state.h"

namespace meshrun::rendezvous::state::etcd {

class Client;

// How Load reads the state. It reads every record and key at one revision
// of etcd (the first read's: one consistent state), one read at a time, in
// pages of about `page_bytes`: etcd 3.4 walks the whole rest of the range
// for every page however small, so few large pages cost far less than many
// small ones (docs/performance.md, "Loading the state"). A page etcd's
// answer cannot carry (over the client's max_receive_bytes) is read again
// in halves.
struct JournalOptions {
  // One read of a page, on one member: waited for, never sent again
  // elsewhere while etcd may still be working on it.
  absl::Duration load_timeout = absl::Seconds(120);
  // The size a page of keys aims at, bytes (keys and values); half the
  // client's default max_receive_bytes.
  int64_t page_bytes = 32 << 20;
  // The largest store write taken, bytes (its keys with their etcd prefix,
  // values and about 16 bytes per key): a bigger one is refused
  // RESOURCE_EXHAUSTED naming this limit, before anything is applied. Keep
  // it under etcd's --max-request-bytes (1.5 MiB by default): a write etcd
  // refuses fails the writer, and the replica loads its state again.
  int64_t max_write_bytes = 1400 << 10;
  // The group-commit writer of the store's writes (store_writer.h).
  StoreWriterOptions writer;
};

// Where the journal keeps the store keys of run `run_id`'s `incarnation` at
// `round`: "<kv_prefix><run id in hex>/<incarnation, 16 hex digits>/<round,
// 20 digits>/", each key's name after it. For tools and tests that lay keys
// out as the journal does (bench/state_load).
std::string StoreKeyPrefix(const std::string& kv_prefix, const std::string& run_id, int64_t incarnation,
                           int64_t round);

// `client` and `election` must outlive the journal; `runs_prefix` and
// `kv_prefix` end with '/'. The journal's thread stops when it is destroyed.
std::unique_ptr<RunJournal> MakeEtcdJournal(Client* client, Election* election, std::string runs_prefix,
                                            std::string kv_prefix, JournalOptions options = {});

}  // namespace meshrun::rendezvous::state::etcd
