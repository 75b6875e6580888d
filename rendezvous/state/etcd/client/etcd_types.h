// The values of etcd's v3 key-value API, without protobuf or gRPC: keys and
// their revisions, range reads, puts, deletes and transactions, as the
// etcd_client.h Client sends and answers them. Each mirrors the message of
// etcd's rpc.proto / kv.proto with the same name and meaning (etcd's API
// reference: https://etcd.io/docs/v3.4/learning/api/). Keys and values are
// bytes (std::string may hold any byte). Revisions are etcd's: the store's
// global counter, raised by one for every write (a Txn's writes share one).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace meshrun::rendezvous::state::etcd {

// mvccpb.KeyValue.
struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // Revision of the put that created the key (0: the key does not exist).
  int64_t mod_revision = 0;     // Revision of its last modification.
  int64_t version = 0;          // Puts since it was created (1 for a new key).
  int64_t lease = 0;            // The lease it is attached to; 0: none.
};

// The range_end that makes [prefix, PrefixEnd(prefix)) every key starting
// with `prefix` (etcd's clientv3.GetPrefixRangeEnd): the prefix with its last
// byte below 0xff raised by one and what follows it dropped; "\0" (every key)
// when the prefix is empty or all 0xff. Pure.
std::string PrefixEnd(absl::string_view prefix);

// RangeRequest's options (the key itself is the call's argument).
struct RangeOptions {
  enum class Sort { kNone, kAscend, kDescend };
  enum class SortTarget { kKey, kVersion, kCreate, kMod, kValue };
  std::string range_end;        // "": the key alone; PrefixEnd(key): the prefix; "\0": key and every key after it.
  int64_t limit = 0;            // At most this many keys (0: no limit); RangeResult::more tells whether more exist.
  int64_t revision = 0;         // Read at this revision (0: the latest). Older than the last compaction: OUT_OF_RANGE.
  bool serializable = false;    // false: linearizable (confirmed by etcd's leader); true: the member's local copy.
  bool keys_only = false;       // Values left empty.
  bool count_only = false;      // Only RangeResult::count.
  Sort sort = Sort::kNone;
  SortTarget sort_target = SortTarget::kKey;
  int64_t max_create_revision = 0;  // Only keys created at or before it (0: no bound).
  int64_t min_create_revision = 0;  // Only keys created at or after it (0: no bound).
};

struct RangeResult {
  std::vector<KeyValue> kvs;
  bool more = false;      // More keys in the range than `limit` let through.
  int64_t count = 0;      // Keys in the range (before `limit`).
  int64_t revision = 0;   // The store's revision the read saw.
};

struct PutResult {
  int64_t revision = 0;   // The revision of this put.
  bool has_prev = false;  // When asked for (Op::prev_kv) and the key existed before.
  KeyValue prev;
};

struct DeleteResult {
  int64_t revision = 0;
  int64_t deleted = 0;             // Keys deleted.
  std::vector<KeyValue> prev_kvs;  // When asked for (Op::prev_kv).
};

// One condition of a Txn (etcdserverpb.Compare): `target` of `key` (or of
// every key in [key, range_end)) compared with the given value. A key that
// does not exist has version, create and mod revision 0, lease 0 and an
// empty value, so "create_revision == 0" means "absent".
struct Compare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue, kLease };
  enum class Result { kEqual, kGreater, kLess, kNotEqual };
  Target target = Target::kVersion;
  Result result = Result::kEqual;
  std::string key;
  std::string range_end;  // "": the key alone.
  int64_t number = 0;     // For every target but kValue.
  std::string value;      // For kValue.

  static Compare Value(std::string key, Result r, std::string value);
  static Compare Version(std::string key, Result r, int64_t version);
  static Compare CreateRevision(std::string key, Result r, int64_t revision);
  static Compare ModRevision(std::string key, Result r, int64_t revision);
  static Compare Lease(std::string key, Result r, int64_t lease);
  // create_revision == 0.
  static Compare Absent(std::string key) { return CreateRevision(std::move(key), Result::kEqual, 0); }
};

struct Txn;

// One operation of a Txn (etcdserverpb.RequestOp). etcd refuses a Txn that
// writes one key twice (INVALID_ARGUMENT "duplicate key given in txn request").
struct Op {
  enum class Kind { kRange, kPut, kDelete, kTxn };
  Kind kind = Kind::kRange;
  std::string key;
  std::string range_end;  // kRange, kDelete: "" for the key alone.
  std::string value;      // kPut.
  int64_t lease = 0;      // kPut: attach the key to this lease (0: none).
  bool prev_kv = false;   // kPut, kDelete: return what was there.
  RangeOptions range;     // kRange (its range_end is ignored: use `range_end`).
  std::shared_ptr<const Txn> txn;  // kTxn: a nested transaction (etcd 3.3 and later).

  static Op Get(std::string key, RangeOptions o = {});
  static Op GetPrefix(std::string prefix, RangeOptions o = {});
  static Op Put(std::string key, std::string value, int64_t lease = 0);
  static Op Delete(std::string key);
  static Op DeletePrefix(std::string prefix);
  static Op Nested(Txn txn);
};

// A transaction (etcdserverpb.TxnRequest): when every compare holds, the
// success ops run, else the failure ops, atomically at one revision. etcd
// refuses more than 128 ops in either list (--max-txn-ops) and requests above
// 1.5 MiB (--max-request-bytes): Client::Txn fails RESOURCE_EXHAUSTED then.
// A nested Txn's ops count on their own, not toward their parent's.
struct Txn {
  std::vector<Compare> compare;
  std::vector<Op> success;
  std::vector<Op> failure;
};

struct TxnResult;

// The result of one Op, by its kind.
struct OpResult {
  Op::Kind kind = Op::Kind::kRange;
  RangeResult range;
  PutResult put;
  DeleteResult del;
  std::shared_ptr<const TxnResult> txn;
};

struct TxnResult {
  bool succeeded = false;  // Every compare held: the success ops ran.
  int64_t revision = 0;    // The store's revision after the Txn (its writes' revision when it wrote).
  std::vector<OpResult> results;  // One per op of the branch that ran, in order.
  // Election::FencedTxn only: etcd applied the Txn on an earlier attempt
  // whose answer was lost. `succeeded` and `revision` hold; `results` is
  // empty (a Range's answer is lost with it: read again).
  bool replayed = false;
};

// A lease (LeaseGrantResponse).
struct Lease {
  int64_t id = 0;
  int64_t ttl_s = 0;  // As granted: etcd raises a TTL below ceil(1.5 x its election timeout) to that.
};

// One event of a Watch (mvccpb.Event).
struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;            // kDelete: the key, with mod_revision the deletion's revision and no value.
  bool has_prev = false;  // When asked for (WatchOptions::prev_kv) and the key existed before.
  KeyValue prev;
};

// One member's Maintenance.Status.
struct MemberStatus {
  std::string endpoint;  // host:port asked.
  std::string version;   // etcd's version, e.g. "3.4.23".
  uint64_t member_id = 0;
  uint64_t leader = 0;   // The leader's member id as this member sees it; 0: it has none.
  uint64_t raft_term = 0;
  int64_t raft_index = 0;
  int64_t db_size = 0;   // Bytes.
  std::vector<std::string> errors;  // etcd's own ("etcdserver: no leader", alarms such as NOSPACE).
};

// One member of Cluster.MemberList.
struct MemberInfo {
  uint64_t id = 0;
  std::string name;
  std::vector<std::string> peer_urls;
  std::vector<std::string> client_urls;
  bool is_learner = false;
};

}  // namespace meshrun::rendezvous::state::etcd
