#include "agent/tcpstore/protocol.h"

#include <array>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace meshrun::agent::tcpstore {
namespace {

// Query type numbers, by dialect (the index is the number on the wire).
constexpr std::array<Op, 19> kCurrentOps = {
    Op::kValidate,  Op::kSet,      Op::kCompareSet, Op::kGet,        Op::kAdd,       Op::kCheck,     Op::kWait,
    Op::kNumKeys,   Op::kDeleteKey, Op::kAppend,    Op::kMultiGet,   Op::kMultiSet,  Op::kCancelWait, Op::kPing,
    Op::kQueuePush, Op::kQueuePop, Op::kQueueLen,   Op::kListKeys,   Op::kBarrier};
constexpr std::array<Op, 13> kLegacyOps = {Op::kSet,       Op::kCompareSet, Op::kGet,      Op::kAdd,      Op::kCheck,
                                           Op::kWait,      Op::kNumKeys,    Op::kWatchKey, Op::kDeleteKey, Op::kAppend,
                                           Op::kMultiGet,  Op::kMultiSet,   Op::kCancelWait};

// The fields after the query type.
enum class Shape { kNone, kU32, kKey, kKeyValue, kKeyTwoValues, kKeyI64, kKeys, kKeyValues };

Shape ShapeOf(Op op) {
  switch (op) {
    case Op::kValidate:
    case Op::kPing: return Shape::kU32;
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush: return Shape::kKeyValue;
    case Op::kCompareSet: return Shape::kKeyTwoValues;
    case Op::kGet:
    case Op::kDeleteKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
    case Op::kWatchKey: return Shape::kKey;
    case Op::kAdd:
    case Op::kBarrier: return Shape::kKeyI64;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet: return Shape::kKeys;
    case Op::kMultiSet: return Shape::kKeyValues;
    case Op::kNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys: return Shape::kNone;
  }
  return Shape::kNone;
}

// Reads fields from buf[pos...]; `short_` once a field is past the end.
class Cursor {
 public:
  Cursor(absl::string_view buf, const Limits& limits) : buf_(buf), limits_(limits) {}
  bool short_read() const { return short_; }
  size_t pos() const { return pos_; }
  absl::Status error() const { return error_; }
  bool ok() const { return !short_ && error_.ok(); }

  template <typename T>
  T Fixed() {
    T v{};
    if (!ok()) return v;
    if (buf_.size() - pos_ < sizeof(T)) {
      short_ = true;
      return v;
    }
    std::memcpy(&v, buf_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string Bytes(size_t max, const char* what) {
    const uint64_t n = Fixed<uint64_t>();
    if (!ok()) return {};
    if (n > max) {
      error_ = absl::InvalidArgumentError(absl::StrCat("a ", what, " of ", n, " bytes; at most ", max, " allowed"));
      return {};
    }
    if (buf_.size() - pos_ < n) {
      short_ = true;
      return {};
    }
    std::string v(buf_.substr(pos_, n));
    pos_ += n;
    return v;
  }
  std::string Key() { return Bytes(limits_.max_key_bytes, "key"); }
  std::string Value() { return Bytes(limits_.max_value_bytes, "value"); }
  size_t Count() {
    const uint64_t n = Fixed<uint64_t>();
    if (ok() && n > limits_.max_keys) {
      error_ = absl::InvalidArgumentError(absl::StrCat(n, " keys in one request; at most ", limits_.max_keys,
                                                       " allowed"));
    }
    return ok() ? static_cast<size_t>(n) : 0;
  }

 private:
  absl::string_view buf_;
  const Limits& limits_;
  size_t pos_ = 0;
  bool short_ = false;
  absl::Status error_;
};

void ReadFields(Cursor& c, Request& r) {
  switch (ShapeOf(r.op)) {
    case Shape::kNone: break;
    case Shape::kU32: r.nonce = c.Fixed<uint32_t>(); break;
    case Shape::kKey: r.keys.push_back(c.Key()); break;
    case Shape::kKeyValue:
      r.keys.push_back(c.Key());
      r.values.push_back(c.Value());
      break;
    case Shape::kKeyTwoValues:
      r.keys.push_back(c.Key());
      r.values.push_back(c.Value());
      r.values.push_back(c.Value());
      break;
    case Shape::kKeyI64:
      r.keys.push_back(c.Key());
      r.number = c.Fixed<int64_t>();
      break;
    case Shape::kKeys: {
      const size_t n = c.Count();
      for (size_t i = 0; i < n && c.ok(); ++i) r.keys.push_back(c.Key());
      break;
    }
    case Shape::kKeyValues: {
      const size_t n = c.Count();
      for (size_t i = 0; i < n && c.ok(); ++i) {
        r.keys.push_back(c.Key());
        r.values.push_back(c.Value());
      }
      break;
    }
  }
}

}  // namespace

const char* OpName(Op op) {
  switch (op) {
    case Op::kValidate: return "VALIDATE";
    case Op::kSet: return "SET";
    case Op::kCompareSet: return "COMPARE_SET";
    case Op::kGet: return "GET";
    case Op::kAdd: return "ADD";
    case Op::kCheck: return "CHECK";
    case Op::kWait: return "WAIT";
    case Op::kNumKeys: return "GETNUMKEYS";
    case Op::kDeleteKey: return "DELETE_KEY";
    case Op::kAppend: return "APPEND";
    case Op::kMultiGet: return "MULTI_GET";
    case Op::kMultiSet: return "MULTI_SET";
    case Op::kCancelWait: return "CANCEL_WAIT";
    case Op::kPing: return "PING";
    case Op::kQueuePush: return "QUEUE_PUSH";
    case Op::kQueuePop: return "QUEUE_POP";
    case Op::kQueueLen: return "QUEUE_LEN";
    case Op::kListKeys: return "LIST_KEYS";
    case Op::kBarrier: return "BARRIER";
    case Op::kWatchKey: return "WATCH_KEY";
  }
  return "?";
}

void RequestParser::Feed(absl::string_view bytes) {
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (1 << 20) && pos_ > buf_.size() / 2) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(bytes.data(), bytes.size());
}

absl::StatusOr<std::optional<Request>> RequestParser::Next() {
  absl::string_view rest(buf_.data() + pos_, buf_.size() - pos_);
  if (rest.empty()) return std::nullopt;
  if (dialect_ == Dialect::kUnknown) {
    // A current client's first request is VALIDATE: query type 0, then the
    // magic number. A legacy client's type 0 is SET, whose key length
    // (uint64) never starts with those 4 bytes within max_key_bytes.
    if (rest[0] == 0) {
      if (rest.size() < 5) return std::nullopt;
      uint32_t magic = 0;
      std::memcpy(&magic, rest.data() + 1, 4);
      dialect_ = magic == kValidationMagic ? Dialect::kCurrent : Dialect::kLegacy;
    } else {
      dialect_ = Dialect::kLegacy;
    }
  }
  const uint8_t type = static_cast<uint8_t>(rest[0]);
  Request r;
  if (dialect_ == Dialect::kCurrent) {
    if (type >= kCurrentOps.size()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown TCPStore query type ", type, " (PyTorch 2.x numbering, 0..",
                                                     kCurrentOps.size() - 1, ")"));
    }
    r.op = kCurrentOps[type];
  } else {
    if (type >= kLegacyOps.size()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown TCPStore query type ", type,
                                                     " (PyTorch 1.x numbering, 0..", kLegacyOps.size() - 1, ")"));
    }
    r.op = kLegacyOps[type];
  }
  Cursor c(rest.substr(1), limits_);
  ReadFields(c, r);
  if (!c.error().ok()) {
    return absl::InvalidArgumentError(absl::StrCat(OpName(r.op), ": ", c.error().message()));
  }
  if (c.short_read()) {
    if (rest.size() > limits_.max_request_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(OpName(r.op), ": a request of more than ",
                                                     limits_.max_request_bytes, " bytes (max_request_bytes)"));
    }
    return std::nullopt;
  }
  if (r.op == Op::kValidate && r.nonce != kValidationMagic) {
    return absl::InvalidArgumentError(absl::StrCat("VALIDATE: magic number ", r.nonce, ", expected ", kValidationMagic));
  }
  pos_ += 1 + c.pos();
  return std::optional<Request>(std::move(r));
}

void AppendU8(std::string* out, uint8_t v) { out->push_back(static_cast<char>(v)); }
void AppendU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), sizeof v); }
void AppendI64(std::string* out, int64_t v) { out->append(reinterpret_cast<const char*>(&v), sizeof v); }
void AppendBytes(std::string* out, absl::string_view v) {
  const uint64_t n = v.size();
  out->append(reinterpret_cast<const char*>(&n), sizeof n);
  out->append(v.data(), v.size());
}

std::string EncodeRequest(const Request& r, Dialect dialect) {
  std::string out;
  uint8_t type = 0;
  bool found = false;
  if (dialect == Dialect::kLegacy) {
    for (size_t i = 0; i < kLegacyOps.size() && !found; ++i) {
      if (kLegacyOps[i] == r.op) type = static_cast<uint8_t>(i), found = true;
    }
  } else {
    for (size_t i = 0; i < kCurrentOps.size() && !found; ++i) {
      if (kCurrentOps[i] == r.op) type = static_cast<uint8_t>(i), found = true;
    }
  }
  AppendU8(&out, found ? type : 0xff);
  auto count = [&](size_t n) {
    const uint64_t v = n;
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  };
  switch (ShapeOf(r.op)) {
    case Shape::kNone: break;
    case Shape::kU32: AppendU32(&out, r.nonce); break;
    case Shape::kKey: AppendBytes(&out, r.keys.at(0)); break;
    case Shape::kKeyValue:
      AppendBytes(&out, r.keys.at(0));
      AppendBytes(&out, r.values.at(0));
      break;
    case Shape::kKeyTwoValues:
      AppendBytes(&out, r.keys.at(0));
      AppendBytes(&out, r.values.at(0));
      AppendBytes(&out, r.values.at(1));
      break;
    case Shape::kKeyI64:
      AppendBytes(&out, r.keys.at(0));
      AppendI64(&out, r.number);
      break;
    case Shape::kKeys:
      count(r.keys.size());
      for (const std::string& k : r.keys) AppendBytes(&out, k);
      break;
    case Shape::kKeyValues:
      count(r.keys.size());
      for (size_t i = 0; i < r.keys.size(); ++i) {
        AppendBytes(&out, r.keys[i]);
        AppendBytes(&out, r.values.at(i));
      }
      break;
  }
  return out;
}

}  // namespace meshrun::agent::tcpstore
