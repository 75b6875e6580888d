// The members' agreement at the store level, with every member a thread of
// this process against a real in-process rendezvous server: AgreeAndExchange
// and the NCCL unique-id exchange called directly (no communicator; no GPU
// needed), both ways of checking (everyone_checks_up_to 64 and 0).
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "agreement.h"
#include "agreement_support.h"
#include "client/grpc_store.h"
#include "client/status.h"
#include "rendezvous/server.h"

using namespace meshrun;
using namespace meshrun::client;
using namespace meshrun::agreement_test;

namespace {

// A store client of `run` on `server`, as a mesh member makes one.
absl::StatusOr<std::shared_ptr<Store>> StoreOf(const rendezvous::RendezvousServer& server, const std::string& run) {
  GrpcStoreOptions so;
  so.endpoint = server.endpoint();
  so.run_id = run;
  return ConnectGrpcStore(so);
}

// Every member failed with `code` and exactly `message`.
void CheckEveryMemberFails(const std::map<int, absl::Status>& statuses, absl::StatusCode code,
                           const std::string& message) {
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(s.code() == code);
    CHECK(s.message() == message);
  }
}

// The NCCL unique-id exchange of a (2, 4) mesh (replicate, shard) for
// `rank`, with `shape` in its description; ids come from a counter (the
// exchange does not look inside them; the e2e test uses real NCCL ids).
absl::StatusOr<std::vector<std::string>> ExchangeIds(const rendezvous::RendezvousServer& server,
                                                     const std::string& run, int rank, const std::string& shape,
                                                     absl::Duration timeout, int everyone_checks_up_to) {
  auto store = StoreOf(server, run);
  if (!store.ok()) return store.status();
  mesh::internal::GroupSpec replicate, shard;
  replicate.key = absl::StrCat("mesh/ids/d0/row", rank % 4);
  replicate.name = replicate.key;
  replicate.dim_name = "replicate";
  replicate.ranks = {rank % 4, rank % 4 + 4};
  replicate.group_rank = rank / 4;
  shard.key = absl::StrCat("mesh/ids/d1/row", rank / 4);
  shard.name = shard.key;
  shard.dim_name = "shard";
  for (int c = 0; c < 4; ++c) shard.ranks.push_back(rank / 4 * 4 + c);
  shard.group_rank = rank % 4;
  mesh::internal::Agreement agreement{{"cuda", "nccl", shape, "replicate,shard", rank, "world", 0, rank, ""},
                                      "mesh/ids",
                                      {0, 1, 2, 3, 4, 5, 6, 7},
                                      [](int r) { return absl::StrCat("rank ", r); },
                                      everyone_checks_up_to};
  int n = 0;
  return mesh::internal::ExchangeUniqueIds(**store, {replicate, shard}, agreement, timeout, [&] {
    return absl::StatusOr<std::string>(absl::StrCat("id-of-rank-", rank, "-", n++));
  });
}

}  // namespace

TEST_CASE("NCCL id exchange: each row gets its leader's id: one request per rank (and a larger mesh's verdict)",
          "[mesh]") {
  const int checks = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << checks);
  auto server = StartServer();
  std::map<int, std::vector<std::string>> ids;
  absl::Mutex mu;
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    auto got = ExchangeIds(*server, "ids", rank, "2,4", absl::Seconds(30), checks);
    if (!got.ok()) return got.status();
    absl::MutexLock lock(&mu);
    ids[rank] = *got;
    return absl::OkStatus();
  });
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    REQUIRE(s.ok());
  }
  for (int r = 0; r < 8; ++r) {
    CHECK(ids[r][0] == absl::StrCat("id-of-rank-", r % 4, "-0"));      // replicate: led by coordinate 0
    // shard: led by rank 0 (its second id: it leads a replicate row too) or 4.
    CHECK(ids[r][1] == (r < 4 ? "id-of-rank-0-1" : "id-of-rank-4-0"));
  }
  auto counts = QueryRequestCounts(server->endpoint(), "");
  REQUIRE(counts.ok());
  CHECK((*counts)["KvMultiGet"] == 8);
  CHECK((*counts)["KvCompareSet"] == (checks > 0 ? 0 : 1));
  CHECK(KvRequests(*counts) == (checks > 0 ? 8 : 9));
}

TEST_CASE("NCCL id exchange: one member's other shape fails every member with the same message", "[mesh]") {
  const int checks = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << checks);
  auto server = StartServer();
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    return ExchangeIds(*server, "ids-mismatch", rank, rank == 6 ? "4,2" : "2,4", absl::Seconds(30), checks).status();
  });
  CheckEveryMemberFails(statuses, absl::StatusCode::kFailedPrecondition,
                        "mesh mismatch: rank 6 and rank 0 disagree on the shape: (4,2) vs (2,4) (rank 6 vs rank 0)");
}

TEST_CASE("NCCL id exchange: a member that never arrives is named by every other member", "[mesh]") {
  const int checks = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << checks);
  auto server = StartServer();
  const absl::Time start = absl::Now();
  auto statuses = OnThreads({0, 1, 2, 3, 4, 6, 7}, [&](int rank) -> absl::Status {
    return ExchangeIds(*server, "ids-absent", rank, "2,4", absl::Seconds(1), checks).status();
  });
  CHECK(absl::Now() - start < absl::Seconds(5));
  CheckEveryMemberFails(statuses, absl::StatusCode::kDeadlineExceeded,
                        "rank 5 did not arrive within 1s");
}

namespace {

// AgreeAndExchange for rank `rank` of 8, with the description `desc` and
// row peers as in a (2, 4) mesh; payload "p<rank>".
absl::StatusOr<std::vector<std::string>> Agree(const rendezvous::RendezvousServer& server, const std::string& run,
                                               const mesh::internal::Description& desc,
                                               const std::vector<int>& read_from, absl::Duration timeout,
                                               int everyone_checks_up_to) {
  auto store = StoreOf(server, run);
  if (!store.ok()) return store.status();
  mesh::internal::Agreement agreement{desc, "mesh/a", {0, 1, 2, 3, 4, 5, 6, 7},
                                      [](int r) { return absl::StrCat("rank ", r); }, everyone_checks_up_to};
  mesh::internal::Exchange x;
  x.payload = absl::StrCat("p", desc.rank);
  x.read_from = read_from;
  x.peers = read_from;
  return mesh::internal::AgreeAndExchange(**store, agreement, x, timeout);
}

std::vector<int> RowPeers(int rank) {
  std::vector<int> peers{rank < 4 ? rank + 4 : rank - 4};
  for (int c = 0; c < 4; ++c) {
    if (rank / 4 * 4 + c != rank) peers.push_back(rank / 4 * 4 + c);
  }
  return peers;
}

}  // namespace

TEST_CASE("agreement: members on different backends get the mismatch at once, not a timeout", "[mesh]") {
  const int checks = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << checks);
  auto server = StartServer();
  const absl::Time start = absl::Now();
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    mesh::internal::Description d{"cpu", "gloo", "2,4", "replicate,shard", rank, "world", rank / 4, rank % 4, ""};
    std::vector<int> read_from = RowPeers(rank);
    if (rank == 3) {  // reads only its rows' leaders, as NCCL does
      d.device = "cuda";
      d.backend = "nccl";
      d.gpu = "0000:01:00.0";
      read_from = {0};
    }
    auto got = Agree(*server, "backends", d, read_from, absl::Seconds(30), checks);
    if (got.ok() && (*got)[0] != absl::StrCat("p", read_from[0])) return absl::InternalError("wrong payload");
    return got.status();
  });
  CHECK(absl::Now() - start < absl::Seconds(10));
  CheckEveryMemberFails(statuses, absl::StatusCode::kFailedPrecondition,
                        "mesh mismatch: rank 3 and rank 0 disagree on the device type: cuda vs cpu (rank 3 vs rank 0)");
}

TEST_CASE("agreement: two members of one node on one GPU fail every member: other nodes may reuse it", "[mesh]") {
  const int checks = GENERATE(64, 0);
  INFO("everyone_checks_up_to " << checks);
  auto server = StartServer();
  auto statuses = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    // Nodes of 4; local rank l on bus "l", except rank 6 (node 1, local 2) on bus "1".
    mesh::internal::Description d{"cuda", "nccl", "2,4", "replicate,shard", rank, "world", rank / 4, rank % 4,
                                  absl::StrCat("bus-", rank == 6 ? 1 : rank % 4)};
    return Agree(*server, "gpus", d, RowPeers(rank), absl::Seconds(30), checks).status();
  });
  CheckEveryMemberFails(statuses, absl::StatusCode::kFailedPrecondition,
                        "local ranks 1 and 2 of node 1 share one GPU (PCI bus bus-1); give each process its own device");
  auto fine = OnThreads({0, 1, 2, 3, 4, 5, 6, 7}, [&](int rank) -> absl::Status {
    mesh::internal::Description d{"cuda", "nccl", "2,4", "replicate,shard", rank, "world", rank / 4, rank % 4,
                                  absl::StrCat("bus-", rank % 4)};
    auto got = Agree(*server, "gpus-ok", d, RowPeers(rank), absl::Seconds(30), checks);
    if (!got.ok()) return got.status();
    for (size_t k = 0; k < got->size(); ++k) {
      if ((*got)[k] != absl::StrCat("p", RowPeers(rank)[k])) return absl::InternalError("wrong payload");
    }
    return absl::OkStatus();
  });
  for (const auto& [rank, s] : fine) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(s.ok());
  }
}
