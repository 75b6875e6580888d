// The etcd journal (etcd_journal.h).
#include "rendezvous/state/etcd/etcd_journal.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "rendezvous/state/etcd/client/etcd_client.h"
#include "rendezvous/state/etcd/record_parts.h"

namespace meshrun::rendezvous::state::etcd {
namespace {

// Where the records in parts keep them (record_parts.h): beside the
// records, "<P>/runs/" -> "<P>/runs.parts/" (outside the records' range).
std::string RecordPartsPrefix(std::string runs_prefix) {
  if (!runs_prefix.empty() && runs_prefix.back() == '/') runs_prefix.pop_back();
  return runs_prefix + ".parts/";
}

// A round as 20 digits: keys sort by round.
std::string Round20(int64_t round) { return absl::StrFormat("%020d", std::max<int64_t>(0, round)); }

// The journal (etcd_journal.h).
class EtcdJournal : public RunJournal {
 public:
  EtcdJournal(Client* client, Election* election, std::string runs_prefix, std::string kv_prefix,
              JournalOptions options)
      : client_(client),
        election_(election),
        prefix_(std::move(runs_prefix)),
        kv_(std::move(kv_prefix)),
        parts_(RecordPartsPrefix(prefix_)),
        options_(options),
        writer_(election, options.writer) {
    dropper_ = std::thread([this] { DropLoop(); });
  }
  ~EtcdJournal() override {
    {
      absl::MutexLock lock(&drop_mu_);
      stopping_ = true;
    }
    dropper_.join();
  }

  absl::StatusOr<bool> SaveKeysAsync(const std::string& run_id, int64_t incarnation, int64_t round,
                                     const std::vector<std::pair<std::string, std::string>>& set,
                                     const std::vector<std::string>& erase, SavedCallback saved) override {
    const std::string base = StoreKeyPrefix(kv_, run_id, incarnation, round);
    StoreWriter::Write w;
    int64_t bytes = 0;
    for (const auto& [k, v] : set) {
      w.ops.push_back(Op::Put(base + k, v));
      bytes += static_cast<int64_t>(base.size() + k.size() + v.size()) + kOpOverhead;
    }
    for (const auto& k : erase) {
      w.ops.push_back(Op::Delete(base + k));
      bytes += static_cast<int64_t>(base.size() + k.size()) + kOpOverhead;
    }
    if (bytes > options_.max_write_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a store write of ", bytes, " bytes (keys and values) is more than one etcd request carries: "
          "max_write_bytes=", options_.max_write_bytes, " (meshrun server --state_max_write_bytes; keep it under "
          "etcd's --max-request-bytes, 1.5 MiB by default)"));
    }
    // A run with no record yet (a store-only run's first write): its record
    // goes with its first keys, so that every key in etcd belongs to a
    // record (Load drops those that do not). Counted as recorded from now:
    // a write that fails makes the replica load again, which recounts.
    absl::MutexLock lock(&mu_);
    const bool record = recorded_.count({run_id, incarnation}) == 0;
    if (record) {
      RunRecord r;
      r.run_id = run_id;
      r.incarnation = incarnation;
      r.store_only = true;
      w.ops.push_back(Op::Put(prefix_ + run_id, EncodeRunRecord(r)));
    }
    w.done = std::move(saved);
    // Submitted under mu_: writes reach the writer in the order their
    // stores applied them (each store calls this under its own lock).
    if (absl::Status s = writer_.Submit(std::move(w)); !s.ok()) return s;
    if (record) recorded_.insert({run_id, incarnation});
    return false;
  }

  absl::Status SaveKeys(const std::string& run_id, int64_t incarnation, int64_t round,
                        const std::vector<std::pair<std::string, std::string>>& set,
                        const std::vector<std::string>& erase) override {
    absl::Notification done;
    absl::Status outcome;
    absl::StatusOr<bool> queued = SaveKeysAsync(run_id, incarnation, round, set, erase, [&](absl::Status s) {
      outcome = std::move(s);
      done.Notify();
    });
    if (!queued.ok()) return queued.status();
    done.WaitForNotification();
    return outcome;
  }

  // Queued to the writer, behind the store writes before it.
  absl::Status DropKeysBelow(const std::string& run_id, int64_t incarnation, int64_t round) override {
    const std::string base = KvRun(run_id, incarnation);
    Op del = Op::Delete(base);
    del.range_end = absl::StrCat(base, Round20(round));
    StoreWriter::Write w;
    w.ops.push_back(std::move(del));
    w.done = [id = run_id.substr(0, 64), round](absl::Status s) {
      if (!s.ok()) {
        Logger("rdzv")->warn("run '{}': could not drop the store's keys below round {}: {}", id, round,
                             std::string(s.message()));
      }
    };
    return writer_.Submit(std::move(w));
  }

  // Queued to the writer, behind the store writes before it, so that etcd
  // takes a run's records and keys in the order the run made them.
  void SaveAsync(const RunRecord& record, SavedCallback done) override {
    auto answer = std::make_shared<SavedCallback>(std::move(done));
    absl::Status refused;
    {
      absl::MutexLock lock(&mu_);
      // A save made before its run was removed, arriving after: not written
      // again.
      if (dropped_.count({record.run_id, record.incarnation}) == 0) {
        auto it = last_seq_.find(record.run_id);
        // A record with a higher seq is queued already: it holds this one's
        // change, and this one is answered once it is saved (an empty write
        // behind it).
        const bool superseded = it != last_seq_.end() && it->second >= record.seq;
        std::vector<StoreWriter::Write> writes;
        if (superseded) {
          writes.emplace_back();
        } else {
          writes = RecordWritesLocked(record);
        }
        const bool in_parts = writes.size() > 1;
        writes.back().done = [answer](absl::Status s) { (*answer)(std::move(s)); };
        // In order; a write refused stops the rest (parts queued before it
        // are named by no head: the next load drops them).
        for (StoreWriter::Write& w : writes) {
          refused = writer_.Submit(std::move(w));
          if (!refused.ok()) break;
        }
        if (refused.ok() && !superseded) {
          last_seq_[record.run_id] = record.seq;
          recorded_.insert({record.run_id, record.incarnation});
          // (Its writes delete the run's other parts.)
          if (in_parts) {
            parted_.insert(record.run_id);
          } else {
            parted_.erase(record.run_id);
          }
        }
        if (refused.ok()) return;
      }
    }
    (*answer)(refused);
  }

  absl::Status Save(const RunRecord& record) override {
    absl::Notification done;
    absl::Status outcome;
    SaveAsync(record, [&](absl::Status s) {
      outcome = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    return outcome;
  }

  // Queued (see above): OK at once.
  absl::Status Drop(const std::string& run_id, int64_t incarnation) override {
    {
      absl::MutexLock lock(&mu_);
      recorded_.erase({run_id, incarnation});
      if (dropped_.insert({run_id, incarnation}).second) dropped_order_.emplace_back(run_id, incarnation);
      while (dropped_order_.size() > kMaxQueuedDrops) {  // Bounded: the oldest are forgotten.
        dropped_.erase(dropped_order_.front());
        dropped_order_.pop_front();
      }
    }
    absl::MutexLock lock(&drop_mu_);
    if (drops_.size() >= kMaxQueuedDrops) {
      // Bounded: the oldest is left to the next leader's Load (its record
      // comes back as a run, removed again later).
      Logger("rdzv")->warn("etcd: {} run removals queued; the oldest ('{}') is left in etcd", drops_.size(),
                           drops_.front().first.substr(0, 64));
      drops_.pop_front();
    }
    drops_.emplace_back(run_id, incarnation);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<RunRecord>> Load() override {
    // Nothing of this replica's is in flight while it reads: what it loads
    // is what etcd keeps. Writes are taken again once loaded.
    writer_.Stop(absl::UnavailableError("this replica is loading its state from etcd"));
    std::vector<RunRecord> out;
    std::map<std::string, int64_t> seqs;
    // Records and keys at one revision: the first read's.
    int64_t revision = 0;
    std::vector<std::pair<size_t, PartsHead>> heads;  // Records in parts: index in out, head.
    absl::Status read = ForEachKey(prefix_, &revision, [&](const KeyValue& kv) {
      if (std::optional<PartsHead> head = DecodeHead(kv.value)) {
        RunRecord named;  // Its run id and incarnation, until its parts are read.
        named.run_id = kv.key.substr(prefix_.size());
        named.incarnation = head->incarnation;
        heads.emplace_back(out.size(), *head);
        out.push_back(std::move(named));
        return;
      }
      absl::StatusOr<RunRecord> rec = DecodeRunRecord(kv.value);
      if (!rec.ok()) {
        Logger("rdzv")->error("etcd key {}: {}; run left out", kv.key, std::string(rec.status().message()));
        return;
      }
      out.push_back(std::move(*rec));
    });
    if (!read.ok()) return read;
    absl::StatusOr<std::set<std::pair<std::string, int64_t>>> orphans = AssembleParts(&out, &heads, &revision);
    if (!orphans.ok()) return orphans.status();
    for (const RunRecord& r : out) seqs[r.run_id] = r.seq;
    // The store's keys, attached to their runs' incarnations; keys of no
    // record (a removal that did not happen) are dropped.
    std::map<std::string, size_t> by_hex;  // Hex run id -> index in out.
    for (size_t i = 0; i < out.size(); ++i) by_hex[absl::BytesToHexString(out[i].run_id)] = i;
    std::set<std::pair<std::string, int64_t>> stale;  // (hex, incarnation) of no record.
    read = ForEachKey(kv_, &revision, [&](const KeyValue& kv) {
      // <kv><hex>/<incarnation16>/<round20>/<key>
      absl::string_view rest = absl::string_view(kv.key).substr(kv_.size());
      const size_t slash = rest.find('/');
      if (slash == absl::string_view::npos || rest.size() < slash + 39 || rest[slash + 17] != '/' ||
          rest[slash + 38] != '/') {
        return;
      }
      const std::string hex(rest.substr(0, slash));
      uint64_t inc = 0;
      int64_t round = 0;
      if (!absl::SimpleHexAtoi(rest.substr(slash + 1, 16), &inc) ||
          !absl::SimpleAtoi(rest.substr(slash + 18, 20), &round)) {
        return;
      }
      const int64_t incarnation = static_cast<int64_t>(inc);
      auto run = by_hex.find(hex);
      if (run == by_hex.end() || out[run->second].incarnation != incarnation) {
        stale.insert({hex, incarnation});
        return;
      }
      out[run->second].keys.push_back({round, std::string(rest.substr(slash + 39)), kv.value});
    });
    if (!read.ok()) return read;
    // Best effort, a leader's fenced writes.
    std::vector<std::string> drops;
    for (const auto& [hex, inc] : stale) drops.push_back(absl::StrCat(kv_, hex, "/", Incarnation16(inc), "/"));
    for (const auto& [run_id, seq] : *orphans) drops.push_back(SeqPartsPrefix(parts_, run_id, seq));
    for (const std::string& drop : drops) {
      Txn txn;
      txn.success.push_back(Op::DeletePrefix(drop));
      if (absl::Status s = election_->FencedTxn(txn).status(); !s.ok()) {
        Logger("rdzv")->warn("etcd: could not drop the keys of a removed run (or a record's unused parts): {}",
                             std::string(s.message()));
        break;
      }
    }
    absl::MutexLock lock(&mu_);
    last_seq_ = std::move(seqs);
    parted_.clear();
    for (const auto& [i, head] : heads) parted_.insert(out[i].run_id);
    recorded_.clear();
    for (const RunRecord& r : out) recorded_.insert({r.run_id, r.incarnation});
    writer_.Reset();
    return out;
  }

 private:
  static constexpr size_t kMaxQueuedDrops = 65536;
  // What an operation costs in a request beyond its key and value, bytes
  // (an estimate above protobuf's framing).
  static constexpr int64_t kOpOverhead = 16;

  // Load's first page, in keys (its size per key is not known yet), and the
  // most keys of any page.
  static constexpr int64_t kFirstPage = 1024;
  static constexpr int64_t kMaxPage = 1 << 18;

  // Calls `fn` for every key under `prefix`, in key order, at `*revision`
  // (0: the first read's, stored there), in pages of about page_bytes
  // (JournalOptions). Bounded: 2^20 reads.
  absl::Status ForEachKey(const std::string& prefix, int64_t* revision,
                          const std::function<void(const KeyValue&)>& fn, int64_t first_page = kFirstPage) {
    RangeOptions o;
    o.range_end = PrefixEnd(prefix);
    o.sort = RangeOptions::Sort::kAscend;
    o.sort_target = RangeOptions::SortTarget::kKey;
    o.revision = *revision;
    int64_t limit = std::max<int64_t>(1, first_page);
    std::string from = prefix;
    for (int reads = 0; reads < 1 << 20; ++reads) {
      o.limit = limit;
      absl::StatusOr<RangeResult> r = client_->Get(from, o, options_.load_timeout);
      if (absl::IsResourceExhausted(r.status()) && limit > 1) {
        limit /= 2;  // Over max_receive_bytes: the same page in halves.
        continue;
      }
      if (!r.ok()) return r.status();
      if (o.revision == 0) o.revision = *revision = r->revision;
      int64_t bytes = 0;
      for (const KeyValue& kv : r->kvs) {
        bytes += static_cast<int64_t>(kv.key.size() + kv.value.size());
        fn(kv);
      }
      if (!r->more || r->kvs.empty()) return absl::OkStatus();
      from = r->kvs.back().key + std::string(1, '\0');
      // The next page: page_bytes at this page's mean size per key.
      const int64_t per_key = std::max<int64_t>(1, bytes / static_cast<int64_t>(r->kvs.size()));
      limit = std::clamp<int64_t>(options_.page_bytes / per_key, 1, kMaxPage);
    }
    return absl::OkStatus();
  }

  // The writes that save `record` (RecordWriteOps, record_parts.h); the
  // last write's `done` is left to the caller.
  std::vector<StoreWriter::Write> RecordWritesLocked(const RunRecord& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // A part's key, the fence's compare and the transaction's framing fit
    // in the rest.
    const int64_t key_bytes = static_cast<int64_t>(PartKey(parts_, record.run_id, record.seq, 0).size());
    const int64_t part_bytes = std::max<int64_t>(1024, options_.max_write_bytes - 4096 - key_bytes);
    const bool had_parts = parted_.count(record.run_id) > 0;
    std::vector<std::vector<Op>> ops =
        RecordWriteOps(prefix_ + record.run_id, parts_, record, EncodeRunRecord(record), part_bytes, had_parts);
    std::vector<StoreWriter::Write> out(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      out[i].ops = std::move(ops[i]);
      // The head's write answers: a part that fails fails every write after it.
      out[i].done = [](absl::Status) {};
    }
    return out;
  }

  // Load's second read: the parts of the records in parts (`heads`), at
  // `*revision`, put together in place (AssembleRecords). Returns the (run
  // id, seq) of parts no head names, for dropping.
  absl::StatusOr<std::set<std::pair<std::string, int64_t>>> AssembleParts(
      std::vector<RunRecord>* out, std::vector<std::pair<size_t, PartsHead>>* heads, int64_t* revision) {
    PartsAssembler assembler(parts_);
    // Parts are about max_write_bytes each: a first page of a thousand would
    // be far over what one answer carries.
    const int64_t first_page = options_.page_bytes / std::max<int64_t>(1, options_.max_write_bytes);
    absl::Status read =
        ForEachKey(parts_, revision, [&](const KeyValue& kv) { assembler.Add(kv.key, kv.value); }, first_page);
    if (!read.ok()) return read;
    for (const std::string& error : AssembleRecords(&assembler, out, heads)) {
      Logger("rdzv")->error("etcd, under {}: {}; run left out", prefix_, error);
    }
    std::set<std::pair<std::string, int64_t>> orphans;
    for (auto& id : assembler.Untaken()) orphans.insert(std::move(id));
    return orphans;
  }

  static std::string Incarnation16(int64_t incarnation) {
    return absl::StrFormat("%016x", static_cast<uint64_t>(incarnation));
  }
  std::string KvRun(const std::string& run_id, int64_t incarnation) const {
    return absl::StrCat(kv_, absl::BytesToHexString(run_id), "/", Incarnation16(incarnation), "/");
  }

  // One removal: the incarnation's keys, and its record unless a newer
  // run's replaced it meanwhile (a Txn on the record's mod revision).
  absl::Status DoDrop(const std::string& run_id, int64_t incarnation) {
    const std::string key = prefix_ + run_id;
    absl::StatusOr<RangeResult> current = client_->Get(key);
    if (!current.ok()) return current.status();
    Txn txn;
    txn.success.push_back(Op::DeletePrefix(KvRun(run_id, incarnation)));
    bool record_too = false;
    int64_t seq = -1;  // The removed record's: its parts and older ones go (-1: none known).
    if (!current->kvs.empty()) {
      const std::string& value = current->kvs.front().value;
      if (std::optional<PartsHead> head = DecodeHead(value)) {
        record_too = head->incarnation == incarnation;
        seq = head->seq;
      } else {
        absl::StatusOr<RunRecord> rec = DecodeRunRecord(value);
        record_too = !rec.ok() || rec->incarnation == incarnation;
        if (rec.ok()) seq = rec->seq;
      }
      if (record_too) {
        Txn both;
        both.compare.push_back(Compare::ModRevision(key, Compare::Result::kEqual, current->kvs.front().mod_revision));
        both.success = {Op::Delete(key), txn.success.front()};
        if (seq >= 0) {
          // Not past it: a new run under this id may have written parts of
          // a higher seq already, its head still queued.
          Op parts = Op::Delete(RunPartsPrefix(parts_, run_id));
          parts.range_end = SeqPartsPrefix(parts_, run_id, seq + 1);
          both.success.push_back(std::move(parts));
        }
        both.failure = txn.success;
        txn = std::move(both);
      }
    }
    absl::StatusOr<TxnResult> r = election_->FencedTxn(txn);
    if (!r.ok()) return r.status();
    if (record_too && r->succeeded) {
      absl::MutexLock lock(&mu_);
      // Unless a newer record of the run is queued meanwhile.
      if (auto it = last_seq_.find(run_id); it != last_seq_.end() && it->second <= seq) {
        last_seq_.erase(it);
        parted_.erase(run_id);
      }
    }
    return absl::OkStatus();
  }

  // The removal thread: drains drops_ while this replica leads; a failed
  // removal is tried again after a second. Bounded by stopping_.
  void DropLoop() {
    for (;;) {
      std::pair<std::string, int64_t> next;
      {
        absl::MutexLock lock(&drop_mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(drop_mu_) { return stopping_ || !drops_.empty(); };
        drop_mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(1));
        if (stopping_) return;
        if (drops_.empty()) continue;
        next = drops_.front();
      }
      absl::Status s = election_->IsLeader() ? DoDrop(next.first, next.second)
                                             : absl::FailedPreconditionError("not leading");
      absl::MutexLock lock(&drop_mu_);
      if (s.ok()) {
        if (!drops_.empty() && drops_.front() == next) drops_.pop_front();
        continue;
      }
      // Not leading (the next leader's Load drops what has no record), or
      // etcd unreachable: again in a second, unless stopping.
      auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(drop_mu_) { return stopping_; };
      drop_mu_.AwaitWithTimeout(absl::Condition(&stop), absl::Seconds(1));
    }
  }

  Client* const client_;
  Election* const election_;
  const std::string prefix_;
  const std::string kv_;
  const std::string parts_;  // Records in parts (record_parts.h).
  const JournalOptions options_;
  absl::Mutex mu_;  // One record write at a time (FencedTxn's are anyway), in seq order per run.
  std::map<std::string, int64_t> last_seq_ ABSL_GUARDED_BY(mu_);
  // (run id, incarnation) of the records in etcd as this replica knows them.
  std::set<std::pair<std::string, int64_t>> recorded_ ABSL_GUARDED_BY(mu_);
  // Runs whose record is in parts in etcd (record_parts.h), as this replica knows them.
  std::set<std::string> parted_ ABSL_GUARDED_BY(mu_);
  // Incarnations removed (Drop), the newest kMaxQueuedDrops: their late
  // saves are not written.
  std::set<std::pair<std::string, int64_t>> dropped_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<std::string, int64_t>> dropped_order_ ABSL_GUARDED_BY(mu_);
  absl::Mutex drop_mu_;
  std::deque<std::pair<std::string, int64_t>> drops_ ABSL_GUARDED_BY(drop_mu_);
  bool stopping_ ABSL_GUARDED_BY(drop_mu_) = false;
  std::thread dropper_;
  StoreWriter writer_;  // Last: it stops first, while the rest is still there.
};

}  // namespace

std::string StoreKeyPrefix(const std::string& kv_prefix, const std::string& run_id, int64_t incarnation,
                           int64_t round) {
  return absl::StrCat(kv_prefix, absl::BytesToHexString(run_id), "/",
                      absl::StrFormat("%016x", static_cast<uint64_t>(incarnation)), "/", Round20(round), "/");
}

std::unique_ptr<RunJournal> MakeEtcdJournal(Client* client, Election* election, std::string runs_prefix,
                                            std::string kv_prefix, JournalOptions options) {
  return std::make_unique<EtcdJournal>(client, election, std::move(runs_prefix), std::move(kv_prefix), options);
}

}  // namespace meshrun::rendezvous::state::etcd
