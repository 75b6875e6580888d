// What each TCPStore request does to meshrun's store: c10d's TCPStore
// semantics over meshrun::Store (common/store.h), so a PyTorch client sees
// what PyTorch's own server would answer. Pure domain: no sockets.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "agent/tcpstore/protocol.h"
#include "common/store.h"

namespace meshrun::agent::tcpstore {

// Executes `r` against `store` and returns the reply's bytes (empty for a
// request with no reply: SET, APPEND, MULTI_SET). For every request except
// VALIDATE, WAIT and CANCEL_WAIT, which need the connection
// (tcpstore_server.h). As PyTorch's server:
//  - GET and MULTI_GET answer an absent key with an empty value (the client
//    waited for it first);
//  - COMPARE_SET on an absent key sets it when `expected` is empty, else
//    answers `expected` (c10d's reply, kept as is);
//  - ADD keeps the counter as decimal text, so GET reads "5";
//  - APPEND on an absent key sets it (a compare-and-set loop over the store:
//    atomic, at most `max_append_tries` tries under contention);
//  - CHECK is ready when every key is set;
//  - GETNUMKEYS counts the keys of `store` (the round's, under the agent
//    store's namespace; queues are not keys), LIST_KEYS lists them (in no
//    order), RESOURCE_EXHAUSTED naming agent_store_max_listed_keys when more
//    than `max_listed_keys` are set.
// Errors: UNIMPLEMENTED naming the request for WATCH_KEY (PyTorch 1.x's
// callback connections: meshrun's store has no key watches) and for
// QUEUE_* (queues.h serves them); BARRIER is ArriveAtBarrier's; the store's own error (UNAVAILABLE,
// RESOURCE_EXHAUSTED at the store's limits, FAILED_PRECONDITION for a
// write-once key) otherwise. The protocol has no error reply, so the server
// closes the connection on any of them. Thread-safe when `store` is.
absl::StatusOr<std::string> Execute(Store& store, const Request& r, int64_t max_listed_keys = 32768,
                                    int max_append_tries = 1000);

// BARRIER (`r.keys[0]`, world size `r.number`), as PyTorch's server: the
// key, in `store`, is a counter (ADD's decimal text) that each arrival
// raises by one; an arrival that brings it to its world size or past it is
// released at once and releases the waiters of that world size (it sets
// BarrierReleaseKey(key, world size) in `internal`, a namespace no client
// reaches); a key used again with the same world size passes at once, one
// used with a larger one waits until the count reaches it. Returns true
// when this arrival is released now, false when the caller waits for
// BarrierReleaseKey(key, world size) in `internal` (a WAIT), then answers
// STOP_WAITING. (Unlike PyTorch's server, the waiters of another world
// size on the same key are not released by it: a misuse there, too.) The
// stores' errors.
absl::StatusOr<bool> ArriveAtBarrier(Store& store, Store& internal, const Request& r);

// The key whose setting releases BARRIER `key`'s waiters of `world_size`:
// "barrier/<world_size>/<key>" (in the agent store's internal namespace).
std::string BarrierReleaseKey(const std::string& key, int64_t world_size);

// UNIMPLEMENTED naming `op` and what meshrun's store lacks for it.
absl::Status NotServed(Op op);

// True for the requests Execute serves (every Op but VALIDATE, WAIT,
// CANCEL_WAIT, BARRIER, QUEUE_* and the UNIMPLEMENTED ones).
bool Executes(Op op);

}  // namespace meshrun::agent::tcpstore
