// libmesh's fault-tolerance manager (meshrun/fault_tolerance.h): the
// quorum per step, the replicate row's mesh per quorum, healing and the
// commit vote. The lighthouse's protocol is ft/lighthouse_client.h, what a
// quorum means ft/quorum_plan.h.
#include "meshrun/fault_tolerance.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/grpc_store.h"
#include "common/env_registry.h"
#include "common/store.h"
#include "ft/lighthouse_client.h"
#include "ft/quorum_plan.h"
#include "recording_store.h"

namespace meshrun::mesh {

namespace {

absl::Status CheckRange(const char* what, absl::Duration d, absl::Duration lo, absl::Duration hi) {
  if (d >= lo && d <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " ", absl::FormatDuration(d), ": allowed ",
                                                 absl::FormatDuration(lo), " to ", absl::FormatDuration(hi)));
}

absl::StatusOr<std::shared_ptr<Store>> ConnectStore(const World& world, const std::string& run_id, int64_t round,
                                                    absl::Duration timeout) {
  client::GrpcStoreOptions so;
  if (absl::StatusOr<client::GrpcStoreOptions> env_store = client::GrpcStoreOptionsFromEnv(); env_store.ok()) {
    so.tls = std::move(env_store->tls);
  }
  so.endpoint = world.store_endpoint;
  so.run_id = run_id;
  so.round = round;
  so.token = world.token;
  so.connect_timeout = timeout;
  so.rpc_slack = std::min(so.rpc_slack, timeout);
  so.wait_for_connection = false;
  return client::ConnectGrpcStore(so);
}

std::string Escalated(absl::string_view what, const absl::Status& s) {
  return absl::StrCat(what, ": ", s.message());
}

// Calls `op` (a store call that may be repeated: a Set of one value, a
// SetThenMultiGet of this rank's vote, a Get, a Delete) again every 100 ms
// while it fails UNAVAILABLE (the server's leader changing under the
// node's proxy), until `wait` has passed; `op` is given what is left.
template <typename Op>
auto RetryUnavailable(absl::Duration wait, Op op) -> decltype(op(wait)) {
  const absl::Time deadline = absl::Now() + wait;
  for (;;) {  // Bounded by `deadline`.
    auto result = op(std::max(deadline - absl::Now(), absl::ZeroDuration()));
    const absl::Status& s = [&]() -> const absl::Status& {
      if constexpr (std::is_same_v<decltype(result), absl::Status>) {
        return result;
      } else {
        return result.status();
      }
    }();
    if (!absl::IsUnavailable(s) || absl::Now() + absl::Milliseconds(100) >= deadline) return result;
    absl::SleepFor(absl::Milliseconds(100));
  }
}

}  // namespace

struct FaultToleranceManager::Impl {
  std::string device;
  FaultToleranceOptions o;
  World world;  // The group's.
  std::string replica_id;
  std::shared_ptr<Store> group_store;  // The group's run, its round.
  std::unique_ptr<ft::LighthouseClient> lighthouse;

  int64_t seq = 0;   // StartQuorum calls of this incarnation (group store keys).
  int64_t step = 0;  // Committed steps.
  int failed_commits = 0;        // In a row.
  int64_t commit_failures = 0;   // In all (told to the lighthouse).
  absl::Status step_error;
  bool voted = true;  // The last StartQuorum's step was voted on.

  // The group's own mesh (its dims; built once), and the current quorum's
  // replicate row: this rank's peers at the same group rank in every
  // participating group, over the mesh's device, and for "cuda" also over
  // Gloo (host bytes: healing and the vote).
  std::optional<DeviceMesh> group_mesh;
  std::pair<int64_t, int64_t> row_key{-1, -1};  // (quorum id, row epoch) the rows were built for.
  std::optional<DeviceMesh> row;
  std::optional<DeviceMesh> host_row;
  QuorumInfo info;

  absl::Notification stop_heartbeats;
  std::thread heartbeats;

  ~Impl() {
    stop_heartbeats.Notify();
    if (heartbeats.joinable()) heartbeats.join();
  }

  int group_rank() const { return world.rank; }
  std::string Key(absl::string_view what, int64_t seq_no) const {
    return absl::StrCat("ft/", o.name, "/", what, "/", seq_no);
  }

  ProcessGroup* Replicate() const {
    if (!row) return nullptr;
    absl::StatusOr<ProcessGroup*> g = row->GetGroup();
    return g.ok() ? *g : nullptr;
  }
  ProcessGroup* HostRow() const {
    if (host_row) {
      absl::StatusOr<ProcessGroup*> g = host_row->GetGroup();
      return g.ok() ? *g : nullptr;
    }
    return Replicate();
  }
  // Drops the quorum's rows: their connections close, so that a peer
  // waiting in a collective with this rank fails at once. Then their store
  // keys go, so that a run's quorum changes do not fill its store: every
  // member that connected with this rank has read them (a member still
  // building the row is behind a quorum change and fails anyway). The
  // deletes are store calls made here, each within the store's deadline (a
  // store failing over slows the drop, not the peers); one that fails
  // leaves a few keys until the run ends.
  void DropRows() {
    std::vector<std::shared_ptr<internal::RecordingStore>> keys;
    for (std::optional<DeviceMesh>* old : {&row, &host_row}) {
      if (old->has_value()) keys.push_back(internal::KeysWritten(**old));
      old->reset();
    }
    for (const auto& k : keys) {
      if (k == nullptr) continue;
      if (absl::Status s = k->DeleteWritten(); !s.ok()) {
        std::fprintf(stderr, "[meshrun mesh] warning: the replicate row's store keys stay: %s\n",
                     std::string(s.message()).c_str());
      }
    }
  }

  absl::StatusOr<ft::Quorum> AgreeOnQuorum();
  absl::Status BuildRows(const ft::Quorum& q, const ft::QuorumPlan& plan);
  absl::Status Heal(const ft::QuorumPlan& plan);
  void HeartbeatLoop();
};

// Group rank 0 asks the lighthouse and hands the answer (or its error) to
// the group's other ranks through the group's store.
absl::StatusOr<ft::Quorum> FaultToleranceManager::Impl::AgreeOnQuorum() {
  const std::string key = Key("quorum", seq);
  if (group_rank() == 0) {
    absl::StatusOr<ft::Quorum> q =
        lighthouse->AskQuorum(ft::Member{replica_id, step, world.world_size, commit_failures}, o.quorum_timeout);
    const std::string text = ft::EncodeQuorum(q);
    if (absl::Status s = RetryUnavailable(o.mesh.timeout, [&](absl::Duration) { return group_store->Set(key, text); });
        !s.ok()) {
      return absl::Status(s.code(), Escalated("handing the quorum to the group", s));
    }
    return q;
  }
  absl::StatusOr<std::string> text = RetryUnavailable(
      o.quorum_timeout + o.mesh.timeout, [&](absl::Duration left) { return group_store->Get(key, left); });
  if (!text.ok()) {
    return absl::Status(text.status().code(), Escalated("waiting for group rank 0's quorum", text.status()));
  }
  return ft::DecodeQuorum(*text);
}

absl::Status FaultToleranceManager::Impl::BuildRows(const ft::Quorum& q, const ft::QuorumPlan& plan) {
  DropRows();
  const int s = world.world_size;
  // The quorum's world: group g's rank r is rank g * S + r; each group's
  // nodes are numbered apart (the mesh's shared-GPU check compares nodes).
  World qw = world;
  qw.rank = plan.replica_rank * s + world.rank;
  qw.world_size = plan.replica_world_size * s;
  const int nodes_per_group = world.local_world_size > 0 && s % world.local_world_size == 0
                                  ? s / world.local_world_size
                                  : s;
  qw.node_rank = plan.replica_rank * nodes_per_group + world.node_rank;
  qw.run_id = o.shared_run_id;
  qw.round = 0;
  std::vector<int> ranks;
  for (int g = 0; g < plan.replica_world_size; ++g) ranks.push_back(g * s + world.rank);
  MeshOptions mo = o.mesh;
  mo.mesh_id = absl::StrCat("ft-", o.name, "-q", q.quorum_id, "-e", plan.row_epoch, "-r", world.rank);
  mo.releasable_keys = true;  // A row per quorum change: released when the next one is built.
  absl::StatusOr<DeviceMesh> r =
      InitDeviceMeshFromRanks(device, ranks, {plan.replica_world_size}, {o.replicate_dim_name}, qw, mo);
  if (!r.ok()) return r.status();
  row = std::move(*r);
  if (row->device_type() == DeviceType::kCuda) {
    mo.mesh_id += "-host";
    absl::StatusOr<DeviceMesh> h =
        InitDeviceMeshFromRanks("cpu", ranks, {plan.replica_world_size}, {o.replicate_dim_name}, qw, mo);
    if (!h.ok()) return h.status();
    host_row = std::move(*h);
  }
  row_key = {q.quorum_id, plan.row_epoch};
  return absl::OkStatus();
}

// Every participant takes part when anyone is behind: the first one at
// max_step broadcasts the size of its state, then the state.
absl::Status FaultToleranceManager::Impl::Heal(const ft::QuorumPlan& plan) {
  ProcessGroup* row = HostRow();
  if (row == nullptr) return absl::InternalError("no replicate row to heal over");
  std::string state;
  if (plan.replica_rank == plan.heal_source) {
    absl::StatusOr<std::string> sd = o.state_dict();
    if (!sd.ok()) return absl::Status(sd.status().code(), Escalated("state_dict", sd.status()));
    state = std::move(*sd);
  }
  int64_t size = static_cast<int64_t>(state.size());
  if (absl::Status st = row->Broadcast(&size, 1, plan.heal_source); !st.ok()) return st;
  // Whole int64 words (Broadcast counts elements).
  std::vector<int64_t> words((static_cast<size_t>(size) + 7) / 8, 0);
  if (plan.replica_rank == plan.heal_source) std::memcpy(words.data(), state.data(), state.size());
  if (!words.empty()) {
    if (absl::Status st = row->Broadcast(words.data(), words.size(), plan.heal_source); !st.ok()) return st;
  }
  if (!plan.behind) return absl::OkStatus();
  if (absl::Status st = o.load_state_dict(absl::string_view(reinterpret_cast<const char*>(words.data()),
                                                            static_cast<size_t>(size)));
      !st.ok()) {
    return absl::Status(st.code(), Escalated("load_state_dict", st));
  }
  step = plan.max_step;
  return absl::OkStatus();
}

void FaultToleranceManager::Impl::HeartbeatLoop() {
  while (!stop_heartbeats.WaitForNotificationWithTimeout(o.heartbeat_interval)) {
    (void)lighthouse->Heartbeat(replica_id, std::max(o.heartbeat_interval, absl::Seconds(1)));
  }
}

FaultToleranceManager::FaultToleranceManager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FaultToleranceManager::~FaultToleranceManager() = default;

absl::StatusOr<std::unique_ptr<FaultToleranceManager>> FaultToleranceManager::Create(absl::string_view device_type,
                                                                                     FaultToleranceOptions options) {
  absl::StatusOr<World> world = WorldFromEnv();
  if (!world.ok()) return world.status();
  return Create(device_type, std::move(options), *world);
}

absl::StatusOr<std::unique_ptr<FaultToleranceManager>> FaultToleranceManager::Create(absl::string_view device_type,
                                                                                     FaultToleranceOptions o,
                                                                                     const World& world) {
  if (absl::StatusOr<DeviceType> d = ParseDeviceType(device_type); !d.ok()) return d.status();
  if (!o.state_dict || !o.load_state_dict) {
    return absl::InvalidArgumentError("FaultToleranceOptions: state_dict and load_state_dict are required");
  }
  for (absl::Status s : {CheckRange("quorum_timeout", o.quorum_timeout, absl::Milliseconds(1), absl::Hours(168)),
                         CheckRange("heartbeat_interval", o.heartbeat_interval, absl::Milliseconds(1), absl::Hours(1))}) {
    if (!s.ok()) return s;
  }
  if (o.max_failed_commits < 1 || o.max_failed_commits > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_failed_commits ", o.max_failed_commits, ": allowed 1 to 1000000"));
  }
  if (o.name.empty() || o.replicate_dim_name.empty()) {
    return absl::InvalidArgumentError("FaultToleranceOptions: name and replicate_dim_name must not be empty");
  }
  if (o.group_shape.empty()) o.group_shape = {world.world_size};
  for (size_t i = o.group_dim_names.size(); i < o.group_shape.size(); ++i) {
    o.group_dim_names.push_back(i == 0 ? "shard" : absl::StrCat("d", i));
  }
  // The group's own mesh layout checks the shape and names against the
  // group's world size (one line naming them).
  if (absl::StatusOr<MeshLayout> l = MeshLayout::Create(o.group_shape, o.group_dim_names, world.world_size); !l.ok()) {
    return l.status();
  }
  if (o.lighthouse.empty()) o.lighthouse = env::Get(env::kTorchftLighthouse).value_or("");
  if (o.lighthouse.empty()) {
    return absl::FailedPreconditionError(
        "no lighthouse: TORCHFT_LIGHTHOUSE is not set (run under meshrun, without --rdzv_conf lighthouse=0, or set "
        "FaultToleranceOptions::lighthouse)");
  }
  if (o.shared_run_id.empty()) o.shared_run_id = env::Get(env::kLighthouseRunId).value_or("");
  if (o.shared_run_id.empty()) {
    return absl::FailedPreconditionError(
        "no store shared by the replica groups: MESHRUN_LIGHTHOUSE_RUN_ID is not set (run under meshrun, or set "
        "FaultToleranceOptions::shared_run_id)");
  }
  if (o.replica_group.empty()) o.replica_group = env::Get(env::kReplicaGroupId).value_or(world.run_id);
  auto impl = std::make_unique<Impl>();
  impl->device = std::string(device_type);
  impl->world = world;
  impl->replica_id = absl::StrCat(o.replica_group, ":", world.round);
  absl::StatusOr<std::unique_ptr<ft::LighthouseClient>> lh = ft::LighthouseClient::Create(o.lighthouse);
  if (!lh.ok()) return lh.status();
  impl->lighthouse = std::move(*lh);
  absl::StatusOr<std::shared_ptr<Store>> store = ConnectStore(world, world.run_id, world.round, o.mesh.timeout);
  if (!store.ok()) return store.status();
  impl->group_store = std::move(*store);
  MeshOptions mo = o.mesh;
  mo.mesh_id = absl::StrCat("ft-", o.name, "-group");
  absl::StatusOr<DeviceMesh> gm = InitDeviceMesh(device_type, o.group_shape, o.group_dim_names, world, mo);
  if (!gm.ok()) return gm.status();
  impl->group_mesh = std::move(*gm);
  impl->o = std::move(o);
  if (world.rank == 0) impl->heartbeats = std::thread([p = impl.get()] { p->HeartbeatLoop(); });
  return std::unique_ptr<FaultToleranceManager>(new FaultToleranceManager(std::move(impl)));
}

absl::StatusOr<QuorumInfo> FaultToleranceManager::StartQuorum() {
  Impl& m = *impl_;
  if (m.failed_commits >= m.o.max_failed_commits) {
    return absl::AbortedError(absl::StrCat(m.failed_commits, " steps in a row failed to commit (max_failed_commits=",
                                           m.o.max_failed_commits, "): the last error: ", m.step_error.ToString()));
  }
  if (!m.voted) return absl::FailedPreconditionError("StartQuorum again before ShouldCommit: vote on each step");
  ++m.seq;
  m.voted = false;
  m.step_error = absl::OkStatus();
  absl::StatusOr<ft::Quorum> q = m.AgreeOnQuorum();
  if (!q.ok()) return q.status();
  absl::StatusOr<ft::QuorumPlan> plan = ft::PlanQuorum(*q, m.replica_id);
  if (!plan.ok()) return plan.status();
  QuorumInfo info;
  info.quorum_id = q->quorum_id;
  info.replica_rank = plan->replica_rank;
  info.replica_world_size = plan->replica_world_size;
  info.max_step = plan->max_step;
  for (int i : plan->members) info.participants.push_back(q->participants[i].replica_id);
  info.left_out = plan->left_out;
  // A failure anywhere in the quorum raised its row epoch: every member
  // builds its row anew, under new keys. A build that fails (a member that
  // died after the quorum formed) fails this step only, as a failed
  // collective does; the next quorum leaves the dead member out.
  if (std::pair(q->quorum_id, plan->row_epoch) != m.row_key || !m.row) {
    if (absl::Status s = m.BuildRows(*q, *plan); !s.ok()) {
      ReportError(s);
      m.info = info;
      return info;
    }
    info.mesh_changed = true;
  }
  if (plan->anyone_behind) {
    if (absl::Status s = m.Heal(*plan); !s.ok()) {
      ReportError(s);  // This step does not count; a group still behind heals next time.
    } else {
      info.healed = plan->behind;
    }
  }
  m.info = info;
  return info;
}

const DeviceMesh& FaultToleranceManager::group_mesh() const { return *impl_->group_mesh; }
ProcessGroup* FaultToleranceManager::replicate() const { return impl_->Replicate(); }

absl::Status FaultToleranceManager::AllReduce(void* buffer, size_t count, DataType type, void* stream) {
  Impl& m = *impl_;
  ProcessGroup* g = m.Replicate();
  absl::Status s = g == nullptr ? absl::UnavailableError(absl::StrCat("the replicate row of quorum ", m.info.quorum_id,
                                                                      " failed earlier in this step: ",
                                                                      m.step_error.ToString()))
                                : g->AllReduce(buffer, count, type, ReduceOp::kSum, stream);
  if (!s.ok()) ReportError(s);
  return s;
}

void FaultToleranceManager::ReportError(const absl::Status& error) {
  Impl& m = *impl_;
  if (error.ok()) return;
  if (m.step_error.ok()) m.step_error = error;
  m.DropRows();
}

absl::StatusOr<bool> FaultToleranceManager::ShouldCommit(bool local_ok) {
  Impl& m = *impl_;
  if (m.voted) return absl::FailedPreconditionError("ShouldCommit without StartQuorum");
  m.voted = true;
  if (!local_ok && m.step_error.ok()) m.step_error = absl::AbortedError("the step reported it failed");
  int32_t vote = m.step_error.ok() ? 1 : 0;
  // Across the replicate row (host bytes): the lowest vote.
  if (ProcessGroup* row = m.HostRow(); row != nullptr) {
    if (absl::Status s = row->AllReduce(&vote, 1, ReduceOp::kMin); !s.ok()) {
      ReportError(s);
      vote = 0;
    }
  }
  // Across the group, through its store: every rank reads every vote. A
  // rank may reach it one mesh timeout late (a row collective with a peer
  // that hung), so the wait is two.
  std::vector<std::string> keys;
  for (int r = 0; r < m.world.world_size; ++r) keys.push_back(absl::StrCat(m.Key("vote", m.seq), "/", r));
  const std::string mine = vote == 1 ? "1" : "0";
  absl::StatusOr<std::vector<std::string>> votes = RetryUnavailable(2 * m.o.mesh.timeout, [&](absl::Duration left) {
    return m.group_store->SetThenMultiGet({keys[m.group_rank()]}, {mine}, keys, left);
  });
  if (!votes.ok()) {
    return absl::Status(votes.status().code(), Escalated("the group's commit vote", votes.status()));
  }
  // Every rank has read the last step's votes and this step's quorum.
  const std::string last_vote = absl::StrCat(m.Key("vote", m.seq - 1), "/", m.group_rank());
  (void)RetryUnavailable(m.o.mesh.timeout, [&](absl::Duration) { return m.group_store->Delete(last_vote); });
  if (m.group_rank() == 0) {
    const std::string quorum = m.Key("quorum", m.seq);
    (void)RetryUnavailable(m.o.mesh.timeout, [&](absl::Duration) { return m.group_store->Delete(quorum); });
  }
  const bool commit = std::all_of(votes->begin(), votes->end(), [](const std::string& v) { return v == "1"; });
  if (commit) {
    ++m.step;
    m.failed_commits = 0;
  } else {
    ++m.failed_commits;
    ++m.commit_failures;
    if (m.step_error.ok()) m.step_error = absl::AbortedError("another participant's step failed");
  }
  return commit;
}

int64_t FaultToleranceManager::step() const { return impl_->step; }
const std::string& FaultToleranceManager::replica_id() const { return impl_->replica_id; }

}  // namespace meshrun::mesh
