// How long a new leader takes to load a big store from etcd (issue 30: a
// 100,000-rank job's 786,432 keys stopped failover). Writes R runs' records
// (with M members in all, as running jobs' records hold them) and N store
// keys spread over the runs straight into etcd, laid out as the leader's
// journal writes them (rendezvous/state/etcd/etcd_journal.h), then times the
// journal's Load as a replica that starts to lead calls it.
//
//   state_load --state etcd://HOST:PORT,... --keys N [--runs R] [--members M]
//              [--value_bytes B] [--page_bytes P] [--load_timeout S]
//              [--legacy] [--skip_write] [--etcd_pids PID,...]
//
// --legacy reads as the journal did before (pages of 1,024 keys, the
// client's 1 s per try and 3 s per call, tried again on another member).
// --etcd_pids: the etcd members' processes, whose resident memory is
// sampled every 50 ms during the load (their peak and their size before it
// are printed).
// Prints one line per phase: "write: ...", "load: N keys, R runs, M members
// in S s", "etcd memory: ...". Exit 0 when every key and member came back,
// 1 otherwise, 2 on bad arguments.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "rendezvous/state/etcd/client/etcd_client.h"
#include "rendezvous/state/etcd/client/etcd_options.h"
#include "rendezvous/state/etcd/election.h"
#include "rendezvous/state/etcd/etcd_journal.h"
#include "rendezvous/state/state.h"

namespace etcd = meshrun::rendezvous::state::etcd;
namespace state = meshrun::rendezvous::state;

namespace {

double Since(absl::Time t0) { return absl::ToDoubleSeconds(absl::Now() - t0); }

// Run r's record: running at round 0 with `members` members (8 workers
// each), or store-only without members.
state::RunRecord Record(int64_t r, int64_t members) {
  state::RunRecord rec;
  rec.run_id = absl::StrCat("state-load-bench-", r);
  rec.incarnation = 1;
  rec.seq = 1;
  rec.store_only = members == 0;
  rec.state = members == 0 ? "joining" : "running";
  rec.config.min_nodes = rec.config.max_nodes = static_cast<int>(members);
  for (int64_t m = 0; m < members; ++m) {
    state::MemberRecord mr;
    mr.node.node_id = absl::StrCat("node-", r, "-", m);
    mr.node.hostname = absl::StrCat("host-", r, "-", m, ".cluster.local");
    mr.node.addr = absl::StrCat("10.", (m >> 8) & 255, ".", m & 255, ".", r % 250);
    mr.node.pid = 100000 + m;
    mr.node.nproc = 8;
    mr.assignment.node_rank = static_cast<int>(m);
    mr.assignment.node_count = static_cast<int>(members);
    mr.assignment.rank_base = static_cast<int>(8 * m);
    mr.assignment.world_size = static_cast<int>(8 * members);
    mr.assignment.master_addr = "10.0.0.1";
    mr.assignment.master_port = 29500;
    mr.assignment.node_addr = mr.node.addr;
    mr.assignment.session = std::string(43, 's');
    rec.members.push_back(std::move(mr));
  }
  return rec;
}

// `runs` records holding `members` members in all, and `keys` keys of
// `value_bytes` each spread over the runs, 128 puts per Txn (etcd's
// default --max-txn-ops).
absl::Status Write(etcd::Client& client, const std::string& prefix, int64_t keys, int64_t runs, int64_t members,
                   int value_bytes) {
  const std::string value(value_bytes, 'v');
  for (int64_t r = 0; r < runs; ++r) {
    const state::RunRecord rec = Record(r, members / runs + (r < members % runs ? 1 : 0));
    if (absl::StatusOr<etcd::PutResult> p = client.Put(prefix + "/runs/" + rec.run_id, state::EncodeRunRecord(rec));
        !p.ok()) {
      return p.status();
    }
    const std::string base = etcd::StoreKeyPrefix(prefix + "/kv/", rec.run_id, rec.incarnation, 0);
    const int64_t run_keys = keys / runs + (r < keys % runs ? 1 : 0);
    for (int64_t i = 0; i < run_keys;) {
      etcd::Txn txn;
      for (int k = 0; k < 128 && i < run_keys; ++k, ++i) {
        // As a job's keys look: one per rank and purpose.
        txn.success.push_back(etcd::Op::Put(absl::StrCat(base, "rank/", i, "/nccl_unique_id"), value));
      }
      if (absl::StatusOr<etcd::TxnResult> t = client.Transact(txn); !t.ok()) return t.status();
    }
  }
  return absl::OkStatus();
}

// Resident memory of `pid` in bytes (0 when unreadable).
int64_t RssBytes(int pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/statm"));
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

// Samples the members' resident memory every 50 ms until stopped.
class RssSampler {
 public:
  explicit RssSampler(std::vector<int> pids) : pids_(std::move(pids)), before_(pids_.size()), peak_(pids_.size()) {
    for (size_t i = 0; i < pids_.size(); ++i) before_[i] = peak_[i] = RssBytes(pids_[i]);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        for (size_t i = 0; i < pids_.size(); ++i) peak_[i] = std::max(peak_[i], RssBytes(pids_[i]));
        absl::SleepFor(absl::Milliseconds(50));
      }
    });
  }
  // Stops sampling; "pid P: B MiB before, peak K MiB" per member.
  std::string Stop() {
    stop_.store(true);
    thread_.join();
    std::string out;
    for (size_t i = 0; i < pids_.size(); ++i) {
      absl::StrAppendFormat(&out, "%spid %d: %.0f MiB before, peak %.0f MiB", out.empty() ? "" : "; ", pids_[i],
                            before_[i] / 1048576.0, peak_[i] / 1048576.0);
    }
    return out;
  }

 private:
  std::vector<int> pids_;
  std::vector<int64_t> before_, peak_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Times a new leader's load of a big store from etcd");
  etcd::ConnectionFlags flags;
  int64_t keys = 786432, runs = 1, members = 0;
  std::vector<int> etcd_pids;
  int value_bytes = 128;
  double load_timeout = 120;
  int64_t page_bytes = 32 << 20;
  bool legacy = false, skip_write = false;
  app.add_option("--state", flags.url, "etcd://HOST:PORT,...[/PREFIX]")->required();
  app.add_option("--keys", keys, "Store keys to write and load")->check(CLI::Range(int64_t{1}, int64_t{1} << 26));
  app.add_option("--runs", runs, "Runs the keys are spread over")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--members", members, "Members' records in all, spread over the runs (0: store-only runs)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 22));
  app.add_option("--etcd_pids", etcd_pids, "etcd members' pids: their memory during the load")->delimiter(',');
  app.add_option("--value_bytes", value_bytes, "Bytes per value")->check(CLI::Range(0, 1 << 20));
  app.add_option("--page_bytes", page_bytes, "JournalOptions::page_bytes")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--load_timeout", load_timeout, "JournalOptions::load_timeout, seconds");
  app.add_flag("--legacy", legacy, "Read as before issue 30: pages of 1,024 keys, 1 s per try");
  app.add_flag("--skip_write", skip_write, "Load what an earlier run wrote");
  CLI11_PARSE(app, argc, argv);
  flags.call_timeout = absl::Seconds(30);  // Writes of 128 puts on a busy etcd.
  absl::StatusOr<etcd::Connection> conn = etcd::ResolveConnection(flags);
  if (!conn.ok()) {
    std::fprintf(stderr, "state_load: %s\n", std::string(conn.status().message()).c_str());
    return 2;
  }
  const std::string prefix = conn->url.prefix;
  absl::StatusOr<std::unique_ptr<etcd::Client>> client = etcd::Client::Create(conn->client);
  if (!client.ok() || !(*client)->Connect().ok()) {
    std::fprintf(stderr, "state_load: cannot reach etcd at %s\n", flags.url.c_str());
    return 1;
  }
  if (!skip_write) {
    const absl::Time t0 = absl::Now();
    if (absl::Status s = Write(**client, prefix, keys, runs, members, value_bytes); !s.ok()) {
      std::fprintf(stderr, "state_load: write: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    std::printf("write: %lld keys of %d bytes, %lld runs, %lld members in %.1f s\n", static_cast<long long>(keys),
                value_bytes, static_cast<long long>(runs), static_cast<long long>(members), Since(t0));
    std::fflush(stdout);
  }
  // The reader: the client's default timeouts, as a replica's.
  conn->client.call_timeout = absl::Seconds(3);
  absl::StatusOr<std::unique_ptr<etcd::Client>> reader = etcd::Client::Create(conn->client);
  if (!reader.ok() || !(*reader)->Connect().ok()) return 1;
  etcd::ElectionOptions eo;
  eo.prefix = prefix + "/election/";
  etcd::Election election(reader->get(), eo);
  etcd::JournalOptions jo;
  jo.load_timeout = absl::Seconds(load_timeout);
  jo.page_bytes = page_bytes;
  if (legacy) {
    jo.load_timeout = absl::ZeroDuration();  // The client's: 1 s per try, 3 s per call.
    jo.page_bytes = 1024 * (value_bytes + 90);
  }
  std::unique_ptr<state::RunJournal> journal =
      etcd::MakeEtcdJournal(reader->get(), &election, prefix + "/runs/", prefix + "/kv/", jo);
  RssSampler sampler(etcd_pids);
  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::vector<state::RunRecord>> records = journal->Load();
  const double took = Since(t0);
  const std::string memory = sampler.Stop();
  if (!records.ok()) {
    std::printf("load: FAILED after %.1f s: %s\n", took, std::string(records.status().message()).c_str());
    return 1;
  }
  size_t loaded = 0, loaded_members = 0;
  for (const state::RunRecord& r : *records) {
    loaded += r.keys.size();
    loaded_members += r.members.size();
  }
  std::printf("load: %zu keys, %zu runs, %zu members in %.2f s%s\n", loaded, records->size(), loaded_members, took,
              legacy ? " (legacy paging)" : "");
  if (!etcd_pids.empty()) std::printf("etcd memory: %s\n", memory.c_str());
  return static_cast<int64_t>(loaded) == keys && static_cast<int64_t>(loaded_members) == members &&
                 static_cast<int64_t>(records->size()) == runs
             ? 0
             : 1;
}
