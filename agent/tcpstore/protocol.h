// PyTorch's TCPStore wire protocol, as its clients speak it (c10d's
// TCPStore; facts from PyTorch's documentation and source, not its code):
// the requests a client sends and the bytes of the replies it reads. Pure:
// no sockets, no store (agent/tcpstore/store_ops.h executes a request;
// agent/tcpstore/tcpstore_server.h serves a port).
//
// The encoding: a request is one byte, its query type, then its fields.
// Integers are little-endian (the client's native order on every platform
// PyTorch ships for); a key or value is a uint64 length and that many bytes;
// a key list is a uint64 count and that many keys.
//
// Two dialects number the query types differently:
//  - current (PyTorch 2.x): the client's first request on a connection is
//    VALIDATE with the magic number 0x3C85F7CE; then SET=1 ... QUEUE_LEN=16,
//    LIST_KEYS=17, BARRIER=18.
//  - legacy (PyTorch 1.x, Debian's 1.13): no VALIDATE; SET=0 ... WATCH_KEY=7,
//    DELETE_KEY=8, APPEND=9, MULTI_GET=10, MULTI_SET=11, CANCEL_WAIT=12.
// The parser tells them apart by a connection's first bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshrun::agent::tcpstore {

inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;

enum class Dialect { kUnknown, kCurrent, kLegacy };

// Every request either dialect has, by name.
enum class Op {
  kValidate,    // uint32 magic. No reply.
  kSet,         // key, value. No reply.
  kCompareSet,  // key, expected, desired. Reply: value (c10d compareSet).
  kGet,         // key. Reply: value, empty when absent (the client waits first).
  kAdd,         // key, int64. Reply: int64, the new value.
  kCheck,       // keys. Reply: uint8, 0 ready / 1 not ready.
  kWait,        // keys. Reply, once all are set: uint8 0 (stop waiting).
  kNumKeys,     // Reply: int64.
  kDeleteKey,   // key. Reply: int64, 1 when it existed.
  kAppend,      // key, value. No reply.
  kMultiGet,    // keys. Reply: one value per key.
  kMultiSet,    // keys with values. No reply.
  kCancelWait,  // Reply: uint8 1 (wait canceled).
  kPing,        // uint32 nonce. Reply: the nonce.
  kQueuePush,   // key, value. No reply.
  kQueuePop,    // key. Reply: int64 length, then a value when not empty.
  kQueueLen,    // key. Reply: int64.
  kListKeys,    // Reply: int64 count, then the keys.
  kBarrier,     // key, int64 world size. Reply: uint8 0 once all arrived.
  kWatchKey,    // legacy only: key (a callback connection's request).
};

// The request's name as PyTorch spells its query type ("SET", "MULTI_GET").
const char* OpName(Op op);

struct Request {
  Op op = Op::kValidate;
  std::vector<std::string> keys;    // One for single-key requests.
  std::vector<std::string> values;  // SET/APPEND/QUEUE_PUSH: one; COMPARE_SET: expected, desired; MULTI_SET: one per key.
  int64_t number = 0;               // ADD's delta, BARRIER's world size.
  uint32_t nonce = 0;               // VALIDATE's magic, PING's nonce.
};

// Bounds on what one request may carry; a request past one is refused
// (INVALID_ARGUMENT naming the bound) before its bytes are buffered.
struct Limits {
  size_t max_key_bytes = 8 * 1024;          // PyTorch's server: 8 KiB.
  size_t max_value_bytes = 8 * 1024 * 1024;  // PyTorch's server: 8 MiB.
  size_t max_keys = 128 * 1024;             // Keys in one CHECK/WAIT/MULTI_*.
  size_t max_request_bytes = 64 * 1024 * 1024;  // Bytes of one request, all fields.
};

// Splits a connection's byte stream into requests. Not thread-safe (one per
// connection).
class RequestParser {
 public:
  explicit RequestParser(Limits limits = {}) : limits_(limits) {}

  // Appends bytes read from the connection.
  void Feed(absl::string_view bytes);

  // The next complete request, consumed; nullopt when more bytes are needed.
  // INVALID_ARGUMENT for an unknown query type (naming it and the dialect),
  // a wrong validation number, a field past a Limits bound or a request of
  // more than max_request_bytes: the connection cannot go on after one.
  absl::StatusOr<std::optional<Request>> Next();

  Dialect dialect() const { return dialect_; }
  // Bytes fed and not yet consumed.
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  const Limits limits_;
  Dialect dialect_ = Dialect::kUnknown;
  std::string buf_;
  size_t pos_ = 0;
};

// Reply encoding: appends to `out`.
void AppendU8(std::string* out, uint8_t v);
void AppendU32(std::string* out, uint32_t v);
void AppendI64(std::string* out, int64_t v);
void AppendBytes(std::string* out, absl::string_view v);  // uint64 length, then the bytes.

// Request encoding (what a client sends; tests and the benchmark use it).
std::string EncodeRequest(const Request& r, Dialect dialect);

// WAIT's and CHECK's reply bytes.
inline constexpr uint8_t kStopWaiting = 0;
inline constexpr uint8_t kWaitCanceled = 1;
inline constexpr uint8_t kReady = 0;
inline constexpr uint8_t kNotReady = 1;

}  // namespace meshrun::agent::tcpstore
