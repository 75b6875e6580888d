// The clients of the Jepsen-style test (tests/jepsen/jepsen_test.sh): they
// record every store operation they make, with its invocation and completion
// times, for jepsen_check.
//
//   jepsen_client worker --out DIR --stop FILE --max_s S [--pace_ms MS]
//       As a worker of a meshrun job: the store from the environment (its
//       node's store proxy, which follows the leading replica). Until FILE
//       exists (or S seconds pass): one operation at a time on the shared
//       keys, chosen at random: on registers r0..r3 a read, a write of a
//       value unique to this operation, or a compare-set from the value this
//       process last saw to a unique one; on counters c0, c1 an add of 1 or a
//       read. Appends each to DIR/history.w<RANK>.
//   jepsen_client probe --replica HOST:PORT --run RUN --name NAME --out DIR
//                       --stop FILE --max_s S [--interval_ms MS] [--round R]
//       Straight to one replica (no leader following): every MS, a read of
//       the next key (round robin) that does not wait. Appends the read to
//       DIR/history.NAME and the replica's answer to DIR/probes.NAME:
//       serving 1 when it answered the read (the value, or NOT_FOUND), 0
//       when it refused as a standby (its refusal's status details), nothing
//       when the call failed otherwise (a replica that cannot be reached or
//       is stopped proves nothing either way).
//
// The files' formats are jepsen_check's (history.h, serving_intervals.h):
// one line per operation, written whole with one write(2) to a file opened
// O_APPEND, so that a client killed with its host leaves whole lines (at
// worst a truncated last one, which jepsen_check ignores). Times are
// CLOCK_REALTIME nanoseconds, shared by every network namespace of the host.
// A read of an absent key is recorded as an ok read of "-" (no value);
// values written are never empty.
//
// Outcomes: ok, fail (did not happen: a refusal at the door, or any failed
// read), info (a write whose outcome the client cannot know: any other
// error; it may have been applied). Exit 0 once stopped, 2 on bad
// arguments, 1 when the store cannot be reached at all.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/channel.h"
#include "client/grpc_store.h"
#include "common/standby.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"

namespace {

namespace pb = meshrun::v1;

const std::vector<std::string> kRegisters = {"r0", "r1", "r2", "r3"};
const std::vector<std::string> kCounters = {"c0", "c1"};

// An append-only file of whole lines.
class LineFile {
 public:
  explicit LineFile(const std::string& path) : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {}
  ~LineFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  void Append(const std::string& line) {
    std::string l = line + "\n";
    (void)!::write(fd_, l.data(), l.size());
  }

 private:
  int fd_;
};

// One history line (history.h): "-" stands for an empty field.
std::string HistoryLine(const std::string& process, const std::string& op, const std::string& key,
                        const std::string& arg1, const std::string& arg2, const std::string& outcome,
                        const std::string& result, int64_t invoke_ns, int64_t complete_ns) {
  auto f = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  return absl::StrJoin({process, op, key, f(arg1), f(arg2), outcome, f(result), absl::StrCat(invoke_ns),
                        absl::StrCat(complete_ns)},
                       "\t");
}

bool Stopped(const std::string& stop_file, absl::Time deadline) {
  return ::access(stop_file.c_str(), F_OK) == 0 || absl::Now() >= deadline;
}

// A worker's operations, until stopped.
int Worker(const std::string& out, const std::string& stop, double max_s, int pace_ms) {
  absl::StatusOr<meshrun::client::GrpcStoreOptions> options = meshrun::client::GrpcStoreOptionsFromEnv();
  if (!options.ok()) {
    std::fprintf(stderr, "jepsen_client: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  const char* rank = std::getenv("RANK");
  const std::string process = absl::StrCat("w", rank != nullptr ? rank : "?");
  absl::StatusOr<std::shared_ptr<meshrun::Store>> store = meshrun::client::ConnectGrpcStore(*options);
  if (!store.ok()) {
    std::fprintf(stderr, "jepsen_client: %s\n", std::string(store.status().message()).c_str());
    return 1;
  }
  LineFile history(absl::StrCat(out, "/history.", process));
  if (!history.ok()) return 1;
  std::mt19937_64 rng(absl::GetCurrentTimeNanos() ^ ::getpid());
  std::map<std::string, std::string> seen;  // The last value this process saw, per register.
  const absl::Time deadline = absl::Now() + absl::Seconds(max_s);
  int64_t failures = 0;
  for (int64_t n = 0; !Stopped(stop, deadline); ++n) {
    const bool counter = rng() % 3 == 0;
    const std::string& key = counter ? kCounters[rng() % kCounters.size()] : kRegisters[rng() % kRegisters.size()];
    const int choice = static_cast<int>(rng() % 10);
    const std::string unique = absl::StrCat(process, ".", n);
    const int64_t t0 = absl::GetCurrentTimeNanos();
    absl::Status error;  // Not OK: the operation failed (a read) or its outcome is unknown.
    std::string line;
    if (choice < 4) {
      absl::StatusOr<std::string> v = (*store)->Get(key, absl::ZeroDuration());
      const int64_t t1 = absl::GetCurrentTimeNanos();
      if (v.ok()) seen[key] = *v;
      if (!v.ok() && !absl::IsNotFound(v.status())) error = v.status();
      line = HistoryLine(process, "read", key, "", "", error.ok() ? "ok" : "fail", v.ok() ? *v : "", t0, t1);
    } else if (counter) {
      absl::StatusOr<int64_t> v = (*store)->Add(key, 1);
      const int64_t t1 = absl::GetCurrentTimeNanos();
      error = v.status();
      line = HistoryLine(process, "add", key, "1", "", v.ok() ? "ok" : "info", v.ok() ? absl::StrCat(*v) : "", t0, t1);
    } else if (choice < 7) {
      error = (*store)->Set(key, unique);
      const int64_t t1 = absl::GetCurrentTimeNanos();
      line = HistoryLine(process, "write", key, unique, "", error.ok() ? "ok" : "info", "", t0, t1);
    } else {
      const std::string expected = seen[key];
      absl::StatusOr<std::string> v = (*store)->CompareSet(key, expected, unique);
      const int64_t t1 = absl::GetCurrentTimeNanos();
      if (v.ok()) seen[key] = *v;
      error = v.status();
      line = HistoryLine(process, "cas", key, expected, unique, v.ok() ? "ok" : "info", v.ok() ? *v : "", t0, t1);
    }
    history.Append(line);
    // After a failure (a failover in progress): a pause, so that the history
    // is not flooded with operations of unknown outcome.
    const bool failed = !error.ok();
    if (failed && ++failures % 20 == 1) std::fprintf(stderr, "jepsen_client %s: %s\n", process.c_str(), error.ToString().c_str());
    absl::SleepFor(absl::Milliseconds(failed ? 50 : pace_ms));
  }
  return 0;
}

// A probe's reads of one replica, until stopped.
int Probe(const std::string& replica, const std::string& run, int64_t round, const std::string& name,
          const std::string& out, const std::string& stop, double max_s, int interval_ms) {
  auto stub = pb::Store::NewStub(meshrun::client::NewChannel(replica, "", meshrun::TlsMaterial{}));
  LineFile history(absl::StrCat(out, "/history.", name));
  LineFile probes(absl::StrCat(out, "/probes.", name));
  if (!history.ok() || !probes.ok()) return 1;
  std::vector<std::string> keys = kRegisters;
  keys.insert(keys.end(), kCounters.begin(), kCounters.end());
  const absl::Time deadline = absl::Now() + absl::Seconds(max_s);
  for (size_t n = 0; !Stopped(stop, deadline); ++n) {
    const std::string& key = keys[n % keys.size()];
    pb::KvGetRequest req;
    req.mutable_run()->set_run_id(run);
    req.set_round(round);
    req.set_key(key);
    req.set_wait_ms(0);
    pb::KvGetResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    const int64_t t0 = absl::GetCurrentTimeNanos();
    grpc::Status s = stub->KvGet(&ctx, req, &resp);
    const int64_t t1 = absl::GetCurrentTimeNanos();
    const bool answered = s.ok() || s.error_code() == grpc::StatusCode::NOT_FOUND;
    if (answered) {
      history.Append(HistoryLine(name, "read", key, "", "", "ok", s.ok() ? resp.value() : "", t0, t1));
      probes.Append(absl::StrCat(replica, "\t", t0, "\t", t1, "\t1"));
    } else if (meshrun::ParseStandbyDetail(s.error_details(), nullptr)) {
      probes.Append(absl::StrCat(replica, "\t", t0, "\t", t1, "\t0"));
    }
    absl::SleepFor(absl::Milliseconds(interval_ms));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"jepsen_client: recorded store operations for jepsen_check"};
  app.require_subcommand(1);
  std::string out, stop, replica, run, name;
  double max_s = 300;
  int pace_ms = 5, interval_ms = 20;
  int64_t round = 0;
  CLI::App* worker = app.add_subcommand("worker", "as a job's worker, through its node's store proxy");
  CLI::App* probe = app.add_subcommand("probe", "straight to one replica");
  for (CLI::App* sub : {worker, probe}) {
    sub->add_option("--out", out, "directory of the history files")->required();
    sub->add_option("--stop", stop, "stop once this file exists")->required();
    sub->add_option("--max_s", max_s, "stop after this many seconds anyway")->check(CLI::Range(1.0, 3600.0));
  }
  worker->add_option("--pace_ms", pace_ms, "pause between operations")->check(CLI::Range(0, 1000));
  probe->add_option("--replica", replica, "HOST:PORT of the replica")->required();
  probe->add_option("--run", run, "the run id")->required();
  probe->add_option("--name", name, "this probe's name in the files")->required();
  probe->add_option("--round", round, "the round of the keys");
  probe->add_option("--interval_ms", interval_ms, "pause between probes")->check(CLI::Range(1, 10000));
  CLI11_PARSE(app, argc, argv);
  if (worker->parsed()) return Worker(out, stop, max_s, pace_ms);
  return Probe(replica, run, round, name, out, stop, max_s, interval_ms);
}
