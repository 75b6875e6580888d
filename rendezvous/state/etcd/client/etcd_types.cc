#include "rendezvous/state/etcd/client/etcd_types.h"

namespace meshrun::rendezvous::state::etcd {

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  // Empty, or every byte 0xff: no key is greater, so "every key from it on".
  return std::string(1, '\0');
}

namespace {
Compare Make(Compare::Target t, std::string key, Compare::Result r) {
  Compare c;
  c.target = t;
  c.result = r;
  c.key = std::move(key);
  return c;
}
}  // namespace

Compare Compare::Value(std::string key, Result r, std::string value) {
  Compare c = Make(Target::kValue, std::move(key), r);
  c.value = std::move(value);
  return c;
}
Compare Compare::Version(std::string key, Result r, int64_t version) {
  Compare c = Make(Target::kVersion, std::move(key), r);
  c.number = version;
  return c;
}
Compare Compare::CreateRevision(std::string key, Result r, int64_t revision) {
  Compare c = Make(Target::kCreateRevision, std::move(key), r);
  c.number = revision;
  return c;
}
Compare Compare::ModRevision(std::string key, Result r, int64_t revision) {
  Compare c = Make(Target::kModRevision, std::move(key), r);
  c.number = revision;
  return c;
}
Compare Compare::Lease(std::string key, Result r, int64_t lease) {
  Compare c = Make(Target::kLease, std::move(key), r);
  c.number = lease;
  return c;
}

Op Op::Get(std::string key, RangeOptions o) {
  Op op;
  op.kind = Kind::kRange;
  op.key = std::move(key);
  op.range_end = o.range_end;
  op.range = std::move(o);
  return op;
}
Op Op::GetPrefix(std::string prefix, RangeOptions o) {
  o.range_end = PrefixEnd(prefix);
  return Get(std::move(prefix), std::move(o));
}
Op Op::Put(std::string key, std::string value, int64_t lease) {
  Op op;
  op.kind = Kind::kPut;
  op.key = std::move(key);
  op.value = std::move(value);
  op.lease = lease;
  return op;
}
Op Op::Delete(std::string key) {
  Op op;
  op.kind = Kind::kDelete;
  op.key = std::move(key);
  return op;
}
Op Op::DeletePrefix(std::string prefix) {
  Op op = Delete(prefix);
  op.range_end = PrefixEnd(prefix);
  return op;
}
Op Op::Nested(Txn txn) {
  Op op;
  op.kind = Kind::kTxn;
  op.txn = std::make_shared<const Txn>(std::move(txn));
  return op;
}

}  // namespace meshrun::rendezvous::state::etcd
