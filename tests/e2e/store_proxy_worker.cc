// A worker for the store proxy's end-to-end tests (store_proxy_test.cc).
// Modes (argv[1]):
//   mesh        : a 2-D Gloo mesh (2, WORLD_SIZE/2) with libmesh, then the
//                 unique-id exchange of a 3-D mesh (2, 2, WORLD_SIZE/4)
//                 through the store (libmesh's NCCL exchange, with random
//                 128-byte ids, so no GPU is needed), then every worker
//                 reads every leader's ids at once: rank 0 prints the
//                 server's store requests for that last phase
//                 ("identical_reads: requests=N"), and every rank its ids
//                 ("id3d rank=R dim=D row=KEY id=HEX").
//   wait DIR    : sets a key, writes DIR/ready.<rank>, then blocks in a
//                 store read of a key nobody sets (60 s) and, ignoring
//                 SIGTERM, writes DIR/result.<rank>: how that call ended
//                 and how long the next call took ("code=UNAVAILABLE
//                 end_ms=<unix ms> next_code=... next_ms=<duration>").
// Exit 0 when the mode's steps worked.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agreement.h"
#include "client/grpc_store.h"
#include "client/status.h"
#include "meshrun/device_mesh.h"
#include "meshrun/mesh_layout.h"

using namespace meshrun::mesh;

namespace {

int Fail(int rank, const std::string& msg) {
  std::fprintf(stderr, "rank %d: %s\n", rank, msg.c_str());
  return 1;
}

int64_t StoreRequests(const std::map<std::string, int64_t>& counts) {
  int64_t n = 0;
  for (const auto& [method, c] : counts) {
    if (method.rfind("Kv", 0) == 0) n += c;
  }
  return n;
}

std::string Hex(const std::string& bytes, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && i < bytes.size(); ++i) {
    absl::StrAppend(&out, absl::Hex(static_cast<unsigned char>(bytes[i]), absl::kZeroPad2));
  }
  return out;
}

int MeshMode(const World& world) {
  const int rank = world.rank;
  const int n = world.world_size;
  if (n % 4 != 0) return Fail(rank, "needs a world size divisible by 4");
  MeshOptions o;
  o.timeout = absl::Seconds(60);
  auto mesh = InitDeviceMesh("cpu", {2, n / 2}, {"replicate", "shard"}, world, o);
  if (!mesh.ok()) return Fail(rank, mesh.status().ToString());
  auto barrier = [&]() {
    for (int d = 0; d < 2; ++d) (void)(*mesh->GetGroup(d))->Barrier();
  };
  auto options = meshrun::client::GrpcStoreOptionsFromEnv();
  if (!options.ok()) return Fail(rank, options.status().ToString());
  auto store = meshrun::client::ConnectGrpcStore(*options);
  if (!store.ok()) return Fail(rank, store.status().ToString());

  // The unique ids of a 3-D mesh, through libmesh's exchange.
  auto layout = MeshLayout::Create({2, 2, n / 4}, {"dp", "pp", "tp"}, n);
  if (!layout.ok()) return Fail(rank, layout.status().ToString());
  std::vector<int> coord = *layout->CoordinateOf(rank);
  std::vector<internal::GroupSpec> rows;
  std::vector<int> leaders;
  for (int d = 0; d < 3; ++d) {
    internal::GroupSpec spec;
    spec.dim_name = layout->dim_names()[d];
    const int row = layout->RowOf(d, coord);
    spec.key = absl::StrCat("mesh/ids3d/d", d, "/row", row);
    spec.name = spec.key;
    spec.ranks = layout->RowRanks(d, row);
    spec.group_rank = coord[d];
    rows.push_back(spec);
    for (const auto& g : layout->Groups(d)) leaders.push_back(g.front());
  }
  std::mt19937_64 gen(std::random_device{}() ^ static_cast<uint64_t>(rank));
  auto make_id = [&]() -> absl::StatusOr<std::string> {
    std::string id(128, '\0');
    for (auto& c : id) c = static_cast<char>(gen());
    return id;
  };
  internal::Description desc{"cuda", "nccl", absl::StrCat("2,2,", n / 4), "dp,pp,tp", rank, "world", world.node_rank, world.local_rank, ""};
  internal::Agreement agreement{desc, "mesh/ids3d", layout->ranks(), [](int r) { return absl::StrCat("rank ", r); }};
  auto ids = internal::ExchangeUniqueIds(**store, rows, agreement, absl::Seconds(60), make_id);
  if (!ids.ok()) return Fail(rank, ids.status().ToString());
  for (size_t d = 0; d < rows.size(); ++d) {
    std::printf("id3d rank=%d dim=%zu row=%s id=%s\n", rank, d, rows[d].key.c_str(), Hex((*ids)[d], 8).c_str());
  }

  // Every worker reads every leader's ids at once: identical reads.
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  std::vector<std::string> keys;
  for (int l : leaders) keys.push_back(absl::StrCat("mesh/ids3d/data/r", l));
  barrier();
  std::map<std::string, int64_t> before;
  if (rank == 0) {
    auto c = meshrun::client::QueryRequestCounts(world.store_endpoint, options->token, options->tls);
    if (!c.ok()) return Fail(rank, c.status().ToString());
    before = *c;
  }
  barrier();
  auto all = (*store)->MultiGet(keys, absl::Seconds(30));
  if (!all.ok()) return Fail(rank, all.status().ToString());
  barrier();
  if (rank == 0) {
    auto after = meshrun::client::QueryRequestCounts(world.store_endpoint, options->token, options->tls);
    if (!after.ok()) return Fail(rank, after.status().ToString());
    std::printf("identical_reads: requests=%lld workers=%d keys=%zu\n",
                static_cast<long long>(StoreRequests(*after) - StoreRequests(before)), n, keys.size());
  }
  std::printf("rank=%d store proxy mesh OK\n", rank);
  std::fflush(stdout);
  return 0;
}

int64_t UnixMs() { return absl::ToUnixMillis(absl::Now()); }

int WaitMode(const World& world, const std::string& dir) {
  const int rank = world.rank;
  ::signal(SIGTERM, SIG_IGN);  // Outlive the agent's death until the shim's SIGKILL.
  auto options = meshrun::client::GrpcStoreOptionsFromEnv();
  if (!options.ok()) return Fail(rank, options.status().ToString());
  auto store = meshrun::client::ConnectGrpcStore(*options);
  if (!store.ok()) return Fail(rank, store.status().ToString());
  if (absl::Status s = (*store)->Set(absl::StrCat("probe", rank), "v"); !s.ok()) return Fail(rank, s.ToString());
  std::ofstream(absl::StrCat(dir, "/ready.", rank)) << UnixMs() << "\n";
  auto got = (*store)->Get("never-set", absl::Seconds(60));
  const int64_t end = UnixMs();
  const absl::Time next_start = absl::Now();
  absl::Status next = (*store)->Set("after", "x");
  const int64_t next_ms = absl::ToInt64Milliseconds(absl::Now() - next_start);
  std::ofstream(absl::StrCat(dir, "/result.", rank))
      << "code=" << absl::StatusCodeToString(got.status().code()) << " end_ms=" << end
      << " next_code=" << absl::StatusCodeToString(next.code()) << " next_ms=" << next_ms << "\n"
      << got.status().message() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto world = WorldFromEnv();
  if (!world.ok()) return Fail(-1, world.status().ToString());
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "mesh") return MeshMode(*world);
  if (mode == "wait" && argc > 2) return WaitMode(*world, argv[2]);
  return Fail(world->rank, "usage: store_proxy_worker mesh | wait DIR");
}
