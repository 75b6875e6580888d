// Fuzz target: PyTorch's TCPStore protocol parser (agent/tcpstore/protocol.h),
// which reads whatever reaches the agent store's port. The input is fed in
// chunks whose sizes come from its first byte; every request parsed must
// encode back to a stream that parses to the same request (both dialects),
// and no request may be returned past a refused one.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "agent/tcpstore/protocol.h"

using namespace meshrun::agent::tcpstore;

namespace {

bool Same(const Request& a, const Request& b) {
  return a.op == b.op && a.keys == b.keys && a.values == b.values && a.number == b.number && a.nonce == b.nonce;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 17;
  Limits limits;
  limits.max_key_bytes = 64;
  limits.max_value_bytes = 256;
  limits.max_keys = 8;
  limits.max_request_bytes = 4096;
  RequestParser p(limits);
  bool refused = false;
  for (size_t off = 1; off < size && !refused; off += chunk) {
    p.Feed(std::string(reinterpret_cast<const char*>(data + off), std::min(chunk, size - off)));
    for (;;) {
      auto next = p.Next();
      if (!next.ok()) {
        refused = true;
        break;
      }
      if (!next->has_value()) break;
      const Request& r = **next;
      // Round trip: the request encoded in the parser's dialect parses back to itself.
      RequestParser again(limits);
      std::string stream;
      if (p.dialect() == Dialect::kCurrent && r.op != Op::kValidate) {
        Request v;
        v.op = Op::kValidate;
        v.nonce = kValidationMagic;
        stream = EncodeRequest(v, Dialect::kCurrent);
      }
      stream += EncodeRequest(r, p.dialect());
      again.Feed(stream);
      auto first = again.Next();
      if (!first.ok() || !first->has_value()) std::abort();
      if ((*first)->op == Op::kValidate && r.op != Op::kValidate) first = again.Next();
      if (!first.ok() || !first->has_value() || !Same(**first, r)) std::abort();
    }
  }
  return 0;
}
