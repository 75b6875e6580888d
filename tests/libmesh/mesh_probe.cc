// A worker for libmesh's failure and protocol tests. Modes (argv[1]):
//   mismatch R   : rank R builds (4, 2) while the others build (2, 4)
//   absent R T   : rank R never builds the mesh; the others time out after T ms
//   subset       : a (2, 2) mesh over ranks {7, 5, 3, 1}; others are not members
//   ncclids      : the NCCL unique-id exchange for a (2, 4) mesh, checked over
//                  Gloo rows, with the server's request counters
//   release      : a (2, 2) mesh over Gloo with MeshOptions::releasable_keys,
//                  flattened, and one allreduce; then every rank releases its
//                  store keys: none stays under "meshtmp/" (asked of the
//                  store), "mesh/" holds none of it, and the communicators
//                  still work; a second mesh without the option refuses to
//                  release (FAILED_PRECONDITION) and keeps its keys
//   parked FILE  : a (2, 2) mesh over Gloo whose rank 0 starts building it
//                  only once FILE exists (at most 120 s), so the others'
//                  reads of its keys stay parked on the server meanwhile (a
//                  failover test kills the server then); then one allreduce
//                  per dimension, checked
// Exit 0 when the mode's expectation holds; messages on stderr/stdout.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "meshrun/device_mesh.h"
#include "client/grpc_store.h"

using namespace meshrun::mesh;

namespace {

int Fail(int rank, const std::string& msg) {
  std::fprintf(stderr, "rank %d: %s\n", rank, msg.c_str());
  return 1;
}

// The run's store, straight from the server (no TLS), as this worker.
absl::StatusOr<std::shared_ptr<meshrun::Store>> StoreOf(const World& world) {
  meshrun::client::GrpcStoreOptions so;
  so.endpoint = world.store_endpoint;
  so.run_id = world.run_id;
  so.round = world.round;
  so.token = world.token;
  return meshrun::client::ConnectGrpcStore(so);
}

// The store keys under `prefix` of this run, or -1 (the error on stderr).
int64_t KeysUnder(const World& world, const std::string& prefix) {
  auto store = StoreOf(world);
  if (!store.ok()) return -1;
  auto keys = (*store)->Keys(prefix, 0);
  if (!keys.ok()) std::fprintf(stderr, "rank %d: keys: %s\n", world.rank, keys.status().ToString().c_str());
  return keys.ok() ? keys->count : -1;
}

int Release(const World& world) {
  const int rank = world.rank;
  MeshOptions o;
  o.timeout = absl::Seconds(30);
  o.releasable_keys = true;
  o.mesh_id = "released";
  auto mesh = InitDeviceMesh("cpu", {2, 2}, {"a", "b"}, o);
  if (!mesh.ok()) return Fail(rank, mesh.status().ToString());
  auto flat = mesh->Flatten();
  if (!flat.ok()) return Fail(rank, flat.status().ToString());
  ProcessGroup* all = *flat->GetGroup();
  std::vector<int64_t> v = {1};
  if (!all->AllReduce(v.data(), 1).ok() || v[0] != 4) return Fail(rank, "allreduce before the release");
  const int64_t before = KeysUnder(world, "meshtmp/released/");
  const int64_t write_once = KeysUnder(world, "mesh/released/");
  if (absl::Status s = mesh->ReleaseStoreKeys(); !s.ok()) return Fail(rank, s.ToString());
  v = {1};
  if (!all->Barrier().ok() || !all->AllReduce(v.data(), 1).ok() || v[0] != 4) {
    return Fail(rank, "allreduce after the release");
  }
  // Every rank has released (the barrier): nothing of the mesh stays.
  const int64_t after = KeysUnder(world, "meshtmp/released/");
  if (before <= 0 || write_once != 0 || after != 0) {
    return Fail(rank, absl::StrCat("keys under meshtmp/released/: ", before, " before the release, ", after,
                                   " after; under mesh/released/: ", write_once));
  }
  MeshOptions kept;
  kept.timeout = absl::Seconds(30);
  kept.mesh_id = "kept";
  auto second = InitDeviceMesh("cpu", {2, 2}, {"a", "b"}, kept);
  if (!second.ok()) return Fail(rank, second.status().ToString());
  absl::Status refused = second->ReleaseStoreKeys();
  if (!absl::IsFailedPrecondition(refused)) return Fail(rank, "a write-once mesh released its keys");
  if (!(*second->GetGroup("a"))->Barrier().ok() || !(*second->GetGroup("b"))->Barrier().ok()) {
    return Fail(rank, "barrier");
  }
  const int64_t kept_keys = KeysUnder(world, "mesh/kept/");
  if (kept_keys <= 0) return Fail(rank, absl::StrCat("keys under mesh/kept/: ", kept_keys));
  std::printf("rank=%d release OK: %lld keys before, 0 after; a write-once mesh: %s (%lld keys kept)\n", rank,
              static_cast<long long>(before), std::string(refused.message()).c_str(),
              static_cast<long long>(kept_keys));
  return 0;
}

}  // namespace

#ifdef MESHRUN_WITH_NCCL
#include "agreement.h"
#include "client/grpc_store.h"
#include "client/status.h"
#include "nccl/unique_id.h"

static int NcclIds(const World& world) {
  const int rank = world.rank;
  auto mesh = InitDeviceMesh("cpu", {2, 4}, {"replicate", "shard"});
  if (!mesh.ok()) return Fail(rank, mesh.status().ToString());
  meshrun::TlsMaterial tls;
  if (auto env_store = meshrun::client::GrpcStoreOptionsFromEnv(); env_store.ok()) tls = env_store->tls;
  auto counts = [&]() { return meshrun::client::QueryRequestCounts(world.store_endpoint, world.token, tls); };
  // A barrier over both dimensions: every rank has finished what came before.
  auto barrier = [&]() {
    for (int d = 0; d < 2; ++d) (void)(*mesh->GetGroup(d))->Barrier();
  };
  barrier();
  std::map<std::string, int64_t> before;
  if (rank == 0) before = *counts();
  barrier();
  auto store = StoreOf(world);
  if (!store.ok()) return Fail(rank, store.status().ToString());
  std::vector<internal::GroupSpec> rows;
  std::vector<int> coord = *mesh->coordinate();
  for (int d = 0; d < 2; ++d) {
    ProcessGroup* g = *mesh->GetGroup(d);
    internal::GroupSpec spec;
    spec.dim_name = mesh->dim_names()[d];
    int row = mesh->layout().RowOf(d, coord);
    spec.key = absl::StrCat("ncclids/", spec.dim_name, "/row", row);
    spec.name = spec.key;
    spec.ranks = g->ranks();
    spec.group_rank = g->rank();
    rows.push_back(spec);
  }
  internal::Description desc{"cuda", "nccl", "2,4", "replicate,shard", rank, "world", 0, rank, ""};
  internal::Agreement agreement{desc, "ncclids", {0, 1, 2, 3, 4, 5, 6, 7},
                                [](int r) { return absl::StrCat("rank ", r); }};
  auto ids = internal::ExchangeUniqueIds(**store, rows, agreement, absl::Seconds(60), internal::NcclUniqueIdForTest);
  if (!ids.ok()) return Fail(rank, ids.status().ToString());
  barrier();
  if (rank == 0) {
    std::map<std::string, int64_t> after = *counts();
    auto delta = [&](const char* m) { return after[m] - before[m]; };
    int64_t requests = delta("KvSet") + delta("KvGet") + delta("KvMultiGet") + delta("KvWait") + delta("KvCheck") +
                       delta("KvMultiSet") + delta("KvAdd") + delta("KvCompareSet") + delta("KvDelete");
    std::printf("ncclids: KvSet=%lld KvGet=%lld KvMultiGet=%lld KvCompareSet=%lld requests_per_rank_per_dim=%.2f\n",
                static_cast<long long>(delta("KvSet")), static_cast<long long>(delta("KvGet")),
                static_cast<long long>(delta("KvMultiGet")), static_cast<long long>(delta("KvCompareSet")),
                requests / 16.0);
    // One request per rank for both dimensions (its sets, then its reads);
    // 8 members check the agreement themselves (no verdict request).
    if (delta("KvMultiGet") != 8 || delta("KvCompareSet") != 0 || requests != 8) {
      return Fail(rank, "expected one KV request (SetThenMultiGet) per rank for both dimensions, no verdict");
    }
  }
  // Each row compares its id across its members over its own Gloo row.
  for (int d = 0; d < 2; ++d) {
    ProcessGroup* g = *mesh->GetGroup(d);
    const std::string& id = (*ids)[d];
    if (id.size() != 128) return Fail(rank, "an NCCL unique id is 128 bytes");
    std::vector<int64_t> mine(16), all(16 * g->size());
    std::memcpy(mine.data(), id.data(), 128);
    if (!g->AllGather(mine.data(), all.data(), 16).ok()) return Fail(rank, "allgather");
    for (int m = 0; m < g->size(); ++m) {
      if (std::memcmp(all.data() + 16 * m, mine.data(), 128) != 0) {
        return Fail(rank, absl::StrCat("dimension ", d, ": member ", m, " holds another id"));
      }
    }
  }
  if ((*ids)[0] == (*ids)[1]) return Fail(rank, "the two dimensions got the same id");
  // Ids differ across rows: gather every rank's shard-row id over replicate.
  ProcessGroup* rep = *mesh->GetGroup(0);
  std::vector<int64_t> mine(16), all(32);
  std::memcpy(mine.data(), (*ids)[1].data(), 128);
  (void)rep->AllGather(mine.data(), all.data(), 16);
  if (std::memcmp(all.data(), all.data() + 16, 128) == 0) return Fail(rank, "two shard rows got the same id");
  std::string hex;
  for (int i = 0; i < 8; ++i) absl::StrAppend(&hex, absl::Hex(static_cast<unsigned char>((*ids)[1][i]), absl::kZeroPad2));
  std::printf("rank=%d round=%lld shard_id=%s ncclids OK\n", rank, static_cast<long long>(world.round), hex.c_str());
  std::fflush(stdout);
  return 0;
}
#endif

int main(int argc, char** argv) {
  auto world = WorldFromEnv();
  if (!world.ok()) return Fail(-1, world.status().ToString());
  const int rank = world->rank;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "mismatch" && argc > 2) {
    int bad = std::atoi(argv[2]);
    MeshOptions o;
    o.timeout = absl::Seconds(20);
    std::vector<int> shape = rank == bad ? std::vector<int>{4, 2} : std::vector<int>{2, 4};
    auto mesh = InitDeviceMesh("cpu", shape, {"replicate", "shard"}, o);
    if (mesh.ok()) return Fail(rank, "mismatched meshes were built");
    std::printf("rank=%d error=%s\n", rank, std::string(mesh.status().message()).c_str());
    std::fflush(stdout);
    return 3;
  }
  if (mode == "absent" && argc > 3) {
    int absent = std::atoi(argv[2]);
    MeshOptions o;
    o.timeout = absl::Milliseconds(std::atoi(argv[3]));
    if (rank == absent) {
      std::this_thread::sleep_for(std::chrono::seconds(30));
      return 0;
    }
    auto mesh = InitDeviceMesh("cpu", {2, 4}, {"replicate", "shard"}, o);
    if (mesh.ok()) {
      // This rank shares no row with the absent one: its mesh is complete.
      // Wait for the ranks that do share one to fail the job.
      std::this_thread::sleep_for(std::chrono::seconds(30));
      return 0;
    }
    std::printf("rank=%d error=%s\n", rank, std::string(mesh.status().message()).c_str());
    std::fflush(stdout);
    return 3;
  }
  if (mode == "subset") {
    auto mesh = InitDeviceMeshFromRanks("cpu", {7, 5, 3, 1}, {2, 2}, {"a", "b"}, *world);
    if (!mesh.ok()) return Fail(rank, mesh.status().ToString());
    if (rank % 2 == 0) {
      if (mesh->is_member() || mesh->coordinate().has_value()) return Fail(rank, "an outsider is a member");
      auto g = mesh->GetGroup("a");
      if (g.ok() || !absl::IsFailedPrecondition(g.status())) return Fail(rank, "an outsider got a group");
      std::printf("rank=%d not a member: %s\n", rank, std::string(g.status().message()).c_str());
      return 0;
    }
    std::vector<int64_t> v = {rank};
    ProcessGroup* g = *mesh->GetGroup("b");
    if (!g->AllReduce(v.data(), 1).ok()) return Fail(rank, "allreduce");
    int64_t want = 0;
    for (int r : g->ranks()) want += r;
    if (v[0] != want) return Fail(rank, "subset allreduce");
    std::printf("rank=%d coordinate=(%d,%d) subset OK\n", rank, (*mesh->coordinate())[0], (*mesh->coordinate())[1]);
    return 0;
  }
  if (mode == "release") return Release(*world);
  if (mode == "parked" && argc > 2) {
    const std::string release = argv[2];
    if (rank == 0) {
      bool released = false;
      for (int i = 0; i < 2400 && !released; ++i) {  // 120 s at most.
        released = access(release.c_str(), F_OK) == 0;
        if (!released) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!released) return Fail(rank, absl::StrCat(release, " did not appear within 120 s"));
    }
    MeshOptions o;
    o.timeout = absl::Seconds(180);
    auto mesh = InitDeviceMesh("cpu", {2, 2}, {"replicate", "shard"}, o);
    if (!mesh.ok()) return Fail(rank, mesh.status().ToString());
    for (int d = 0; d < 2; ++d) {
      ProcessGroup* g = *mesh->GetGroup(d);
      std::vector<int64_t> v = {rank + 1};
      if (absl::Status s = g->AllReduce(v.data(), 1); !s.ok()) return Fail(rank, s.ToString());
      int64_t want = 0;
      for (int r : g->ranks()) want += r + 1;
      if (v[0] != want) return Fail(rank, absl::StrCat("dimension ", d, ": allreduce gave ", v[0], ", not ", want));
    }
    std::printf("rank=%d coordinate=(%d,%d) parked OK\n", rank, (*mesh->coordinate())[0], (*mesh->coordinate())[1]);
    std::fflush(stdout);
    return 0;
  }
#ifdef MESHRUN_WITH_NCCL
  if (mode == "ncclids") return NcclIds(*world);
#else
  if (mode == "ncclids") {
    std::printf("SKIPPED: built without NCCL\n");
    return 77;
  }
#endif
  return Fail(rank, "usage: mesh_probe mismatch R | absent R T | subset | ncclids | parked FILE");
}
