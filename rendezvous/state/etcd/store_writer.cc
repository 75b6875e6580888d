// The group-commit writer (store_writer.h).
#include "rendezvous/state/etcd/store_writer.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rendezvous/state/etcd/election.h"

namespace meshrun::rendezvous::state::etcd {
namespace {

// Nested transactions per level when a list is packed.
constexpr size_t kFanOut = 8;

bool IsSingleKey(const Op& op) {
  return (op.kind == Op::Kind::kPut || op.kind == Op::Kind::kDelete) && op.range_end.empty();
}

}  // namespace

StoreWriter::StoreWriter(Election* election, StoreWriterOptions options)
    : election_(election), options_(options) {
  thread_ = std::thread([this] { Loop(); });
}

StoreWriter::~StoreWriter() {
  Stop(absl::UnavailableError("the store writer stopped"));
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

absl::Status StoreWriter::Submit(Write write) {
  Queued q;
  q.alone = !std::all_of(write.ops.begin(), write.ops.end(), IsSingleKey);
  for (const Op& op : write.ops) q.bytes += static_cast<int64_t>(op.key.size() + op.value.size());
  q.write = std::move(write);
  absl::MutexLock lock(&mu_);
  if (!refused_.ok()) return refused_;
  if (static_cast<int64_t>(queue_.size()) >= options_.max_queued_writes) {
    return absl::ResourceExhaustedError(absl::StrCat("this replica has ", queue_.size(),
                                                     " store writes queued for etcd (max_queued_writes=",
                                                     options_.max_queued_writes, "): try again"));
  }
  queue_.push_back(std::move(q));
  return absl::OkStatus();
}

void StoreWriter::Stop(const absl::Status& why) {
  std::deque<Queued> failed;
  {
    absl::MutexLock lock(&mu_);
    if (refused_.ok()) refused_ = why;
    failed.swap(queue_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !in_flight_; };
    mu_.Await(absl::Condition(&idle));
  }
  for (Queued& q : failed) q.write.done(why);
}

void StoreWriter::Reset() {
  absl::MutexLock lock(&mu_);
  refused_ = absl::OkStatus();
}

StoreWriter::Stats StoreWriter::stats() const {
  absl::MutexLock lock(&mu_);
  Stats now = stats_;
  now.queued = static_cast<int64_t>(queue_.size());
  now.in_flight = in_flight_writes_;
  return now;
}

std::vector<StoreWriter::Queued> StoreWriter::TakeBatchLocked() {
  std::vector<Queued> batch;
  int64_t bytes = 0;
  size_t ops = 0;
  while (!queue_.empty()) {
    const Queued& next = queue_.front();
    const bool fits = batch.empty() || (!next.alone && !batch.front().alone &&
                                        bytes + next.bytes <= options_.max_batch_bytes &&
                                        ops + next.write.ops.size() <= options_.max_batch_ops);
    if (!fits) break;
    bytes += next.bytes;
    ops += next.write.ops.size();
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return batch;
}

absl::StatusOr<Txn> StoreWriter::BuildTxn(std::vector<Queued>& batch) {
  std::vector<Op> ops;
  if (batch.size() == 1) {
    ops = std::move(batch.front().write.ops);
  } else {
    // etcd refuses a transaction that writes a key twice: each key keeps
    // the last write's operation (the outcome of applying them in order).
    std::map<std::string, Op> last;
    for (Queued& q : batch) {
      for (Op& op : q.write.ops) last[op.key] = std::move(op);
    }
    ops.reserve(last.size());
    for (auto& [key, op] : last) ops.push_back(std::move(op));
  }
  absl::StatusOr<std::vector<Op>> packed = Pack(std::move(ops), kFencedOps);
  if (!packed.ok()) return packed.status();
  Txn txn;
  txn.success = std::move(*packed);
  return txn;
}

void StoreWriter::Loop() {
  for (;;) {
    std::vector<Queued> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_ && queue_.empty()) return;
      batch = TakeBatchLocked();
      in_flight_ = true;
      in_flight_writes_ = static_cast<int64_t>(batch.size());
    }
    absl::StatusOr<Txn> txn = BuildTxn(batch);
    // Writes with no operation (a superseded record's save, waiting only
    // for the writes before it) need no transaction.
    absl::Status outcome = !txn.ok()                   ? txn.status()
                           : txn->success.empty()      ? absl::OkStatus()
                                                       : election_->FencedTxn(*txn).status();
    std::deque<Queued> after;  // Queued behind a failed transaction: failed with it.
    {
      absl::MutexLock lock(&mu_);
      if (outcome.ok()) {
        if (!txn->success.empty()) ++stats_.transactions;
        stats_.writes += static_cast<int64_t>(batch.size());
      } else {
        outcome = absl::Status(outcome.code(), absl::StrCat("a store write could not be saved in etcd: ",
                                                            outcome.message()));
        if (refused_.ok()) refused_ = outcome;
        after.swap(queue_);
      }
    }
    for (Queued& q : batch) q.write.done(outcome);
    for (Queued& q : after) q.write.done(outcome);
    absl::MutexLock lock(&mu_);
    in_flight_writes_ = 0;
    in_flight_ = false;  // Only now: Stop returns once every answer of it is given.
  }
}

absl::StatusOr<std::vector<Op>> StoreWriter::Pack(std::vector<Op> ops, size_t max, int depth) {
  if (ops.size() <= max) return ops;
  if (max <= kFanOut || depth >= 6) {
    return absl::InvalidArgumentError(
        absl::StrCat("a store write of ", ops.size(), " keys is more than one etcd transaction carries"));
  }
  const size_t per = (ops.size() + kFanOut - 1) / kFanOut;
  std::vector<Op> out;
  for (size_t i = 0; i < ops.size(); i += per) {
    const size_t end = std::min(ops.size(), i + per);
    std::vector<Op> part(std::make_move_iterator(ops.begin() + static_cast<ptrdiff_t>(i)),
                         std::make_move_iterator(ops.begin() + static_cast<ptrdiff_t>(end)));
    absl::StatusOr<std::vector<Op>> packed = Pack(std::move(part), max - kFanOut, depth + 1);
    if (!packed.ok()) return packed.status();
    Txn nested;
    nested.success = std::move(*packed);
    out.push_back(Op::Nested(std::move(nested)));
  }
  return out;
}

}  // namespace meshrun::rendezvous::state::etcd
