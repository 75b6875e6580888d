#include "bench/rdzv_scale/sim_workers.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "agent/store_proxy/store_proxy.h"
#include "libmesh/agreement.h"
#include "meshrun/mesh_layout.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"

namespace meshrun::bench {

using mesh::MeshLayout;
namespace mi = mesh::internal;
namespace pb = ::meshrun::v1;

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

// What every worker reports to.
struct Tally {
  absl::Mutex mu;
  double start = 0, end = 0;
  int ok = 0, failed = 0, left = 0;
  std::string error;
  void Done(int rank, double t, const absl::Status& s) {
    absl::MutexLock lock(&mu);
    if (s.ok()) {
      ++ok;
      end = std::max(end, t);
    } else {
      ++failed;
      if (error.empty()) error = absl::StrCat("rank ", rank, ": ", s.message());
    }
    --left;
  }
};

// One simulated worker: libmesh's unique-id exchange as two asynchronous
// calls at most. Deletes itself when done.
class Worker {
 public:
  // `all_ranks`: layout.ranks(), computed once for every worker.
  Worker(std::shared_ptr<pb::Store::Stub> stub, const SimConfig& config, int64_t round, const MeshLayout& layout,
         const std::vector<int>& all_ranks, int rank, int node_rank, int local, std::shared_ptr<Tally> tally)
      : stub_(std::move(stub)),
        run_id_(config.run_id),
        timeout_(config.phase_timeout),
        round_(round),
        rank_(rank),
        tally_(std::move(tally)) {
    std::vector<int> coord = *layout.CoordinateOf(rank);
    const std::string mesh_id = "bench";
    for (int d = 0; d < layout.ndim(); ++d) {
      mi::GroupSpec spec;  // libmesh/device_mesh.cc RowSpec.
      const int row = layout.RowOf(d, coord);
      spec.dim_name = layout.dim_names()[d];
      spec.key = absl::StrCat("mesh/", mesh_id, "/d", d, "/row", row);
      spec.name = absl::StrCat(mesh_id, "/", spec.dim_name, "/row", row);
      spec.ranks = layout.RowRanks(d, row);
      spec.group_rank = coord[d];
      rows_.push_back(std::move(spec));
    }
    mi::Description desc{"cuda", "nccl", absl::StrJoin(layout.shape(), ","), "node,pair,local", rank,
                         absl::StrCat("0..", layout.size() - 1), node_rank, local, ""};
    // Every member but the first plans from members.front() alone
    // (PlanAgreement; VerdictOf reads the verdict), so only the first holds
    // every rank: 32,768 copies of 32,768 ranks would be 4 GiB.
    agreement_ = mi::Agreement{desc, absl::StrCat("mesh/", mesh_id),
                               all_ranks.front() == rank ? all_ranks : std::vector<int>{all_ranks.front()},
                               [](int rr) { return absl::StrCat("rank ", rr); }};
    // Row d's expected id: its leader's make_id call number (rows j < d it leads).
    for (int d = 0; d < layout.ndim(); ++d) {
      const int leader = rows_[d].ranks[0];
      std::vector<int> lc = *layout.CoordinateOf(leader);
      int call = 0;
      for (int j = 0; j < d; ++j) call += lc[j] == 0 ? 1 : 0;
      expected_.push_back(FakeId(leader, call));
    }
  }

  // Plans the worker's exchange with libmesh's code and builds its request,
  // before the clock starts: on a cluster every worker does this on its
  // own core at about the same moment, and its first store request follows.
  // Serialised here, 32,768 workers' plans (each O(its rows), a row of the
  // node dimension holding 4,096 ranks) took seconds of these 2 cores.
  // False (and the worker finished, deleted) when planning failed.
  bool Prepare() {
    int calls = 0;
    absl::StatusOr<mi::UniqueIdPlan> plan =
        mi::PlanUniqueIds(rows_, agreement_, [&]() -> absl::StatusOr<std::string> { return FakeId(rank_, calls++); });
    if (!plan.ok()) {
      Finish(plan.status());
      return false;
    }
    ids_ = std::move(*plan);
    agree_ = mi::PlanAgreement(agreement_, ids_.exchange);
    req_.mutable_run()->set_run_id(run_id_);
    req_.set_round(round_);
    for (const auto& k : agree_.wanted) req_.add_keys(k);
    for (const auto& k : agree_.set_keys) req_.add_set_keys(k);
    for (const auto& v : agree_.set_values) req_.add_set_values(v);
    req_.set_wait_ms(absl::ToInt64Milliseconds(timeout_));
    return true;
  }

  // Sends the worker's one SetThenMultiGet; returns its send time.
  double Send() {
    const double t0 = MonoNow();
    ctx_.set_deadline(absl::ToChronoTime(absl::Now() + timeout_ + absl::Seconds(30)));
    stub_->async()->KvMultiGet(&ctx_, &req_, &resp_, [this](grpc::Status s) { OnExchanged(s); });
    return t0;
  }

 private:
  void OnExchanged(const grpc::Status& s) {
    if (!s.ok()) return Finish(absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message()));
    got_.assign(resp_.values().begin(), resp_.values().end());
    if (got_.size() != agree_.wanted.size()) return Finish(absl::DataLossError("short answer"));
    const std::string verdict = mi::VerdictOf(agreement_, agree_, got_);
    if (!agree_.proposes) return Decide(verdict);
    // The first member of a large mesh proposes the verdict.
    cs_req_.mutable_run()->set_run_id(run_id_);
    cs_req_.set_round(round_);
    cs_req_.set_key(agree_.verdict_key);
    cs_req_.set_desired(verdict);
    cs_ctx_.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    stub_->async()->KvCompareSet(&cs_ctx_, &cs_req_, &cs_resp_, [this](grpc::Status st) {
      if (!st.ok()) return Finish(absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message()));
      Decide(cs_resp_.value());
    });
  }

  void Decide(const std::string& verdict) {
    if (absl::Status v = mi::VerdictStatus(verdict); !v.ok()) return Finish(v);
    std::vector<std::string> payloads(got_.begin() + static_cast<std::ptrdiff_t>(agree_.reads_at), got_.end());
    absl::StatusOr<std::vector<std::string>> ids = mi::FinishUniqueIds(rows_, std::move(ids_), payloads);
    if (!ids.ok()) return Finish(ids.status());
    for (size_t d = 0; d < expected_.size(); ++d) {
      if ((*ids)[d] != expected_[d]) return Finish(absl::DataLossError(absl::StrCat("dimension ", d, ": not its leader's id")));
    }
    Finish(absl::OkStatus());
  }

  void Finish(const absl::Status& s) {
    tally_->Done(rank_, MonoNow(), s);
    delete this;
  }

  // Shared: a call still in flight past the phase keeps them alive.
  const std::shared_ptr<pb::Store::Stub> stub_;
  const std::string run_id_;
  const absl::Duration timeout_;
  const int64_t round_;
  const int rank_;
  const std::shared_ptr<Tally> tally_;
  std::vector<mi::GroupSpec> rows_;
  mi::Agreement agreement_;
  std::vector<std::string> expected_;
  mi::UniqueIdPlan ids_;
  mi::AgreementPlan agree_;
  std::vector<std::string> got_;
  grpc::ClientContext ctx_;
  pb::KvMultiGetRequest req_;
  pb::KvMultiGetResponse resp_;
  grpc::ClientContext cs_ctx_;
  pb::KvCompareSetRequest cs_req_;
  pb::KvCompareSetResponse cs_resp_;
};

WorkersPhase::WorkersPhase(SimConfig config) : config_(std::move(config)), tally_(std::make_shared<Tally>()) {}

WorkersPhase::~WorkersPhase() {
  // Workers never sent finish (and delete themselves) here; the proxies'
  // shutdown cancels what is still in flight.
  for (Worker* w : unsent_) delete w;
  proxies_.clear();
}

PhaseResult WorkersPhase::Prepare(const std::vector<SimNode>& nodes) {
  PhaseResult r;
  const int w = config_.workers_per_agent;
  absl::StatusOr<MeshLayout> layout =
      MeshLayout::Create(WorkersMeshShape(config_.nnodes, w), {"node", "pair", "local"}, config_.nnodes * w);
  if (!layout.ok()) {
    r.failed = static_cast<int>(nodes.size()) * w;
    r.error = std::string(layout.status().message());
    return r;
  }
  r.start = MonoNow();
  // The agents' store proxies, as the agent starts them (agent/session_join.cc).
  for (const SimNode& n : nodes) {
    agent::StoreProxyOptions po;
    po.run_id = config_.run_id;
    po.token = config_.token;
    // As the agent: the node's workers publish together (--nproc_per_node).
    po.batch.expected_publishers = w;
    absl::StatusOr<std::unique_ptr<agent::StoreProxy>> p = agent::StoreProxy::Start(po, n.channel, n.node_id);
    if (!p.ok()) {
      r.failed = static_cast<int>(nodes.size()) * w;
      r.error = absl::StrCat(n.node_id, ": store proxy: ", p.status().message());
      return r;
    }
    (*p)->SetRound(n.round);
    channels_.push_back(grpc::CreateChannel((*p)->endpoint(), grpc::InsecureChannelCredentials()));
    stubs_.push_back(pb::Store::NewStub(channels_.back()));
    proxies_.push_back(std::move(*p));
  }
  // Every channel connected before the clock starts (a worker's store
  // connection is made while its backend sets up, libmesh/device_mesh.cc).
  for (auto& ch : channels_) ch->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  {
    absl::MutexLock lock(&tally_->mu);
    tally_->left = static_cast<int>(nodes.size()) * w;
  }
  unsent_.reserve(nodes.size() * w);
  const std::vector<int> all_ranks = layout->ranks();
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (int l = 0; l < w; ++l) {
      auto* worker = new Worker(stubs_[i], config_, nodes[i].round, *layout, all_ranks, nodes[i].node_rank * w + l,
                                nodes[i].node_rank, l, tally_);
      if (worker->Prepare()) unsent_.push_back(worker);  // Else counted failed, and gone.
    }
  }
  r.end = r.first = MonoNow();
  r.ok = static_cast<int>(unsent_.size());
  r.failed = static_cast<int>(nodes.size()) * w - r.ok;
  if (r.failed > 0) {
    absl::MutexLock lock(&tally_->mu);
    r.error = tally_->error;
  }
  return r;
}

PhaseResult WorkersPhase::Run() {
  PhaseResult r;
  double start = 0;
  std::vector<Worker*> send = std::move(unsent_);
  unsent_.clear();
  for (Worker* worker : send) {
    const double t = worker->Send();  // May finish (and delete itself) at once.
    if (start == 0) start = t;
  }
  Tally& tally = *tally_;
  {
    absl::MutexLock lock(&tally.mu);
    auto all_done = [&tally]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tally.mu) { return tally.left == 0; };
    if (!tally.mu.AwaitWithTimeout(absl::Condition(&all_done), config_.phase_timeout + absl::Seconds(35))) {
      // Calls are bounded by their deadlines; the proxies' shutdown below
      // cancels what is left.
      if (tally.error.empty()) tally.error = absl::StrCat(tally.left, " workers still waiting at the phase timeout");
    }
  }
  proxies_.clear();
  {
    absl::MutexLock lock(&tally.mu);
    auto all_done = [&tally]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tally.mu) { return tally.left == 0; };
    tally.mu.AwaitWithTimeout(absl::Condition(&all_done), absl::Seconds(40));
    r.start = start;
    r.first = tally.end;
    r.end = tally.end;
    r.ok = tally.ok;
    r.failed = tally.failed + tally.left;
    r.error = tally.error;
  }
  return r;
}

}  // namespace meshrun::bench
