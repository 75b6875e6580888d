// `meshrun server` made to lie on purpose, so that the Jepsen-style test
// (tests/jepsen/jepsen_test.sh --lie) can show that its checker notices:
//
//   lying_server --lie=ack_before_save [meshrun server flags...]
//       A store write is acknowledged before its etcd transaction: the
//       replica's journal answers SaveKeys at once (and so SaveKeysAsync,
//       whose default calls it: "saved already") and makes the real save
//       later, on a thread of its own, ignoring its failure. Writes taken
//       while etcd has no quorum are then lost at the next failover.
//   lying_server --lie=open_while_paused [meshrun server flags...]
//       The gate the server admits calls by stays open for as long as the
//       replica still names itself the leader, even when it stopped serving:
//       a leader cut off from etcd (paused) goes on answering reads while
//       another replica is elected and takes writes.
//
// Everything else is meshrun server's own code (launcher::ServerMain), fed
// through its ReplicaSeams. Never installed; tests only.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "agent/process.h"
#include "launcher/server_cmd.h"

namespace {

namespace state = meshrun::rendezvous::state;

// Passes everything to the replica's journal, except that a store write is
// answered OK before it is saved (the save runs on a detached thread).
class AckBeforeSaveJournal : public state::RunJournal {
 public:
  explicit AckBeforeSaveJournal(state::RunJournal* real) : real_(real) {}
  absl::Status Save(const state::RunRecord& record) override { return real_->Save(record); }
  absl::Status Drop(const std::string& run_id, int64_t incarnation) override { return real_->Drop(run_id, incarnation); }
  absl::Status SaveKeys(const std::string& run_id, int64_t incarnation, int64_t round,
                        const std::vector<std::pair<std::string, std::string>>& set,
                        const std::vector<std::string>& erase) override {
    std::thread([real = real_, run_id, incarnation, round, set, erase] {
      (void)real->SaveKeys(run_id, incarnation, round, set, erase);
    }).detach();
    return absl::OkStatus();
  }
  absl::Status DropKeysBelow(const std::string& run_id, int64_t incarnation, int64_t round) override {
    return real_->DropKeysBelow(run_id, incarnation, round);
  }
  absl::StatusOr<std::vector<state::RunRecord>> Load() override { return real_->Load(); }

 private:
  state::RunJournal* real_;
};

// The gate the server reads: follows the replica's, except that once open it
// stays open while the replica names itself the leader. Polled every 5 ms.
class OpenWhilePausedGate {
 public:
  explicit OpenWhilePausedGate(const state::ServingGate* inner) : inner_(inner) {
    outer_.SetReplicasSource([inner] { return inner->Replicas(); });
    std::thread([this] {
      for (;;) {
        const std::string self = inner_->self(), leader = inner_->leader();
        outer_.SetSelf(self);
        outer_.SetLeader(leader);
        outer_.SetServing(inner_->serving() || (outer_.serving() && !self.empty() && leader == self));
        absl::SleepFor(absl::Milliseconds(5));
      }
    }).detach();
  }
  const state::ServingGate* gate() const { return &outer_; }

 private:
  const state::ServingGate* inner_;
  state::ServingGate outer_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strncmp(argv[1], "--lie=", 6) != 0) {
    std::fprintf(stderr, "usage: lying_server --lie=ack_before_save|open_while_paused [meshrun server flags...]\n");
    return 2;
  }
  const std::string lie = argv[1] + 6;
  meshrun::launcher::ReplicaSeams seams;
  if (lie == "ack_before_save") {
    seams.journal = [](state::RunJournal* real) -> state::RunJournal* { return new AckBeforeSaveJournal(real); };
  } else if (lie == "open_while_paused") {
    seams.gate = [](const state::ServingGate* inner) { return (new OpenWhilePausedGate(inner))->gate(); };
  } else {
    std::fprintf(stderr, "lying_server: --lie=%s: must be ack_before_save or open_while_paused\n", lie.c_str());
    return 2;
  }
  std::fprintf(stderr, "lying_server: this replica lies on purpose: %s\n", lie.c_str());
  meshrun::agent::BlockSignals({SIGTERM, SIGINT, SIGHUP});
  argv[1] = argv[0];
  return meshrun::launcher::ServerMain(argc - 1, argv + 1, seams);
}
