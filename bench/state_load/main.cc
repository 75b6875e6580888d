// How long a new leader takes to load a big store from etcd (issue 30: a
// 100,000-rank job's 786,432 keys stopped failover). Writes one run's record
// and N store keys straight into etcd, laid out as the leader's journal
// writes them (rendezvous/state/etcd/etcd_journal.h), then times the
// journal's Load as a replica that starts to lead calls it.
//
//   state_load --state etcd://HOST:PORT,... --keys N [--value_bytes B]
//              [--page_bytes P] [--load_timeout S] [--legacy] [--skip_write]
//
// --legacy reads as the journal did before (pages of 1,024 keys, the
// client's 1 s per try and 3 s per call, tried again on another member).
// Prints one line per phase: "write: N keys in S s", "load: N keys in S s".
// Exit 0 when every key came back, 1 otherwise, 2 on bad arguments.
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "rendezvous/state/etcd/election.h"
#include "rendezvous/state/etcd/etcd_client.h"
#include "rendezvous/state/etcd/etcd_journal.h"
#include "rendezvous/state/etcd/etcd_options.h"
#include "rendezvous/state/state.h"

namespace etcd = meshrun::rendezvous::state::etcd;
namespace state = meshrun::rendezvous::state;

namespace {

double Since(absl::Time t0) { return absl::ToDoubleSeconds(absl::Now() - t0); }

// One run's record and `keys` keys of `value_bytes` each, 128 puts per Txn
// (etcd's default --max-txn-ops).
absl::Status Write(etcd::Client& client, const std::string& prefix, int64_t keys, int value_bytes) {
  state::RunRecord r;
  r.run_id = "state-load-bench";
  r.incarnation = 1;
  r.seq = 1;
  r.state = "joining";
  r.store_only = true;
  if (absl::StatusOr<etcd::PutResult> p = client.Put(prefix + "/runs/" + r.run_id, state::EncodeRunRecord(r));
      !p.ok()) {
    return p.status();
  }
  const std::string base = etcd::StoreKeyPrefix(prefix + "/kv/", r.run_id, r.incarnation, 0);
  const std::string value(value_bytes, 'v');
  for (int64_t i = 0; i < keys;) {
    etcd::Txn txn;
    for (int k = 0; k < 128 && i < keys; ++k, ++i) {
      // As a job's keys look: one per rank and purpose.
      txn.success.push_back(etcd::Op::Put(absl::StrCat(base, "rank/", i, "/nccl_unique_id"), value));
    }
    if (absl::StatusOr<etcd::TxnResult> t = client.Transact(txn); !t.ok()) return t.status();
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Times a new leader's load of a big store from etcd");
  etcd::ConnectionFlags flags;
  int64_t keys = 786432;
  int value_bytes = 128;
  double load_timeout = 120;
  int64_t page_bytes = 32 << 20;
  bool legacy = false, skip_write = false;
  app.add_option("--state", flags.url, "etcd://HOST:PORT,...[/PREFIX]")->required();
  app.add_option("--keys", keys, "Store keys to write and load")->check(CLI::Range(int64_t{1}, int64_t{1} << 26));
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
    if (absl::Status s = Write(**client, prefix, keys, value_bytes); !s.ok()) {
      std::fprintf(stderr, "state_load: write: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    std::printf("write: %lld keys of %d bytes in %.1f s\n", static_cast<long long>(keys), value_bytes, Since(t0));
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
  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::vector<state::RunRecord>> records = journal->Load();
  if (!records.ok()) {
    std::printf("load: FAILED after %.1f s: %s\n", Since(t0), std::string(records.status().message()).c_str());
    return 1;
  }
  size_t loaded = 0;
  for (const state::RunRecord& r : *records) loaded += r.keys.size();
  std::printf("load: %zu keys in %.2f s%s\n", loaded, Since(t0), legacy ? " (legacy paging)" : "");
  return static_cast<int64_t>(loaded) == keys ? 0 : 1;
}
