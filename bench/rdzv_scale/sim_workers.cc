#include "bench/rdzv_scale/sim_workers.h"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "agent/store_proxy.h"
#include "common/grpc_store.h"
#include "libmesh/agreement.h"
#include "meshrun/mesh_layout.h"

namespace meshrun::bench {

using mesh::MeshLayout;
namespace mi = mesh::internal;

std::vector<int> WorkersMeshShape(int nnodes, int workers_per_agent) {
  if (workers_per_agent % 2 == 0) return {nnodes, 2, workers_per_agent / 2};
  return {nnodes, 1, workers_per_agent};
}

namespace {

// The id a leader makes on its `call`-th make_id: 128 bytes (an NCCL
// unique id's size) naming the leader and the call, so that every reader
// can check it got its row leader's id.
std::string FakeId(int rank, int call) {
  std::string id = absl::StrCat("id:r", rank, ":c", call, ":");
  id.resize(128, '.');
  return id;
}

}  // namespace

PhaseResult RunWorkersPhase(const SimConfig& config, const std::vector<SimNode>& nodes) {
  PhaseResult r;
  const int w = config.workers_per_agent;
  absl::StatusOr<MeshLayout> layout =
      MeshLayout::Create(WorkersMeshShape(config.nnodes, w), {"node", "pair", "local"}, config.nnodes * w);
  if (!layout.ok()) {
    r.failed = static_cast<int>(nodes.size()) * w;
    r.error = std::string(layout.status().message());
    return r;
  }
  // The agents' store proxies, as the agent starts it (agent/session_join.cc).
  std::vector<std::unique_ptr<agent::StoreProxy>> proxies;
  for (const SimNode& n : nodes) {
    agent::StoreProxyOptions po;
    po.run_id = config.run_id;
    po.token = config.token;
    // As the agent: the node's workers publish together (--nproc_per_node).
    po.batch.expected_publishers = w;
    absl::StatusOr<std::unique_ptr<agent::StoreProxy>> p = agent::StoreProxy::Start(po, n.channel, n.node_id);
    if (!p.ok()) {
      r.failed = static_cast<int>(nodes.size()) * w;
      r.error = absl::StrCat(n.node_id, ": store proxy: ", p.status().message());
      return r;
    }
    (*p)->SetRound(n.round);
    proxies.push_back(std::move(*p));
  }
  const std::string mesh_id = "bench";
  const absl::Duration timeout = config.phase_timeout;
  absl::Mutex mu;
  double start = 0, end = 0;
  int ok = 0, failed = 0;
  std::string error;
  std::atomic<int> ready{0};
  std::atomic<bool> abort{false};  // Not every worker thread could be started.
  absl::Notification go;
  auto worker = [&](size_t node_index, int local) {
    const SimNode& n = nodes[node_index];
    const int rank = n.node_rank * w + local;
    auto fail = [&](const std::string& what) {
      absl::MutexLock lock(&mu);
      ++failed;
      if (error.empty()) error = absl::StrCat("rank ", rank, ": ", what);
    };
    // As libmesh's InitDeviceMesh: the store, its connection coming up in
    // the background.
    GrpcStoreOptions so;
    so.endpoint = proxies[node_index]->endpoint();
    so.run_id = config.run_id;
    so.round = n.round;
    so.wait_for_connection = false;
    so.rpc_slack = std::min(so.rpc_slack, timeout);
    absl::StatusOr<std::shared_ptr<Store>> store = ConnectGrpcStore(so);
    ready.fetch_add(1);
    go.WaitForNotification();
    if (abort.load()) return;
    if (!store.ok()) return fail(std::string(store.status().message()));
    std::vector<int> coord = *layout->CoordinateOf(rank);
    std::vector<mi::GroupSpec> rows;
    for (int d = 0; d < layout->ndim(); ++d) {
      mi::GroupSpec spec;  // libmesh/device_mesh.cc RowSpec.
      const int row = layout->RowOf(d, coord);
      spec.dim_name = layout->dim_names()[d];
      spec.key = absl::StrCat("mesh/", mesh_id, "/d", d, "/row", row);
      spec.name = absl::StrCat(mesh_id, "/", spec.dim_name, "/row", row);
      spec.ranks = layout->RowRanks(d, row);
      spec.group_rank = coord[d];
      rows.push_back(std::move(spec));
    }
    mi::Description desc{"cuda", "nccl", absl::StrJoin(layout->shape(), ","), "node,pair,local", rank,
                         absl::StrCat("0..", layout->size() - 1), n.node_rank, local, ""};
    mi::Agreement agreement{desc, absl::StrCat("mesh/", mesh_id), layout->ranks(),
                            [](int rr) { return absl::StrCat("rank ", rr); }};
    int calls = 0;
    const double t0 = MonoNow();
    {
      absl::MutexLock lock(&mu);
      if (start == 0 || t0 < start) start = t0;
    }
    absl::StatusOr<std::vector<std::string>> ids = mi::ExchangeUniqueIds(
        **store, rows, agreement, timeout, [&]() -> absl::StatusOr<std::string> { return FakeId(rank, calls++); });
    const double t1 = MonoNow();
    if (!ids.ok()) return fail(std::string(ids.status().message()));
    // Row d's id is its leader's make_id call number (rows j < d it leads).
    for (int d = 0; d < layout->ndim(); ++d) {
      const int leader = rows[d].ranks[0];
      std::vector<int> lc = *layout->CoordinateOf(leader);
      int call = 0;
      for (int j = 0; j < d; ++j) call += lc[j] == 0 ? 1 : 0;
      if ((*ids)[d] != FakeId(leader, call)) return fail(absl::StrCat("dimension ", d, ": not its leader's id"));
    }
    absl::MutexLock lock(&mu);
    ++ok;
    end = std::max(end, t1);
  };
  std::vector<std::thread> threads;
  threads.reserve(nodes.size() * w);
  // One thread per worker: the machine's task limit (kernel.pid_max,
  // 32,768 here) bounds how many workers a run can have.
  try {
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (int l = 0; l < w; ++l) threads.emplace_back(worker, i, l);
    }
  } catch (const std::system_error& e) {
    abort = true;
    error = absl::StrCat("could not start worker thread ", threads.size() + 1, " of ", nodes.size() * w, ": ",
                         e.what(), " (the machine's thread limit)");
  }
  while (ready.load() < static_cast<int>(threads.size())) absl::SleepFor(absl::Milliseconds(1));
  go.Notify();
  for (auto& t : threads) t.join();
  if (abort.load()) failed = static_cast<int>(nodes.size()) * w;
  proxies.clear();
  r.start = start;
  r.first = end;
  r.end = end;
  r.ok = ok;
  r.failed = failed;
  r.error = error;
  return r;
}

}  // namespace meshrun::bench
