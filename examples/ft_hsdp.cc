// Fault-tolerant HSDP with libmesh's fault-tolerance manager
// (meshrun/fault_tolerance.h): the job's mesh is (replicate, shard), say
// (3, 2): each replica group (meshrun --replica_groups=3 --nproc_per_node=2)
// shards a linear model's 64 weights over its "shard" ranks, and the groups
// average their gradient shards over "replicate", whose members are the
// lighthouse's quorum of healthy groups at each step. A group that fails
// restarts alone (the agent) and heals from a healthy group; the others
// train on. Run on the host (cpu, Gloo; the replicate row also runs over
// NCCL with --device cuda, the weights then staying on the host here).
//
//   meshrun --nnodes=3 --replica_groups=3 --nproc_per_node=2 ... ft_hsdp --steps=200
//
// Each rank prints "ft_hsdp: group G rank R pid P restart C" at its start,
// "step N quorum Q replicas P time T" after every committed step, "healed
// to step N" when it healed, and at the end "final group G rank R step N
// loss L weights H" (H a digest of its shard: equal across groups at the
// same rank when the groups' weights are equal). It exits non-zero when the
// model did not learn (the final loss is not below a tenth of the untrained
// weights').
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "example_util.h"
#include "meshrun/fault_tolerance.h"

using namespace meshrun::mesh;

namespace {

constexpr int kDim = 64;
constexpr int kBatch = 32;
constexpr float kLr = 0.05f;

// The target weights, the same on every rank.
std::vector<float> TrueWeights() {
  std::mt19937 gen(7);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> w(kDim);
  for (float& v : w) v = n(gen);
  return w;
}

// The gradient of the mean squared error of `w` on this rank's batch of
// step `step`: samples drawn from (step, group, rank); returns the loss.
float Gradient(const std::vector<float>& w, const std::vector<float>& truth, int64_t step, int group, int rank,
               std::vector<float>* grad) {
  std::mt19937 gen(static_cast<uint32_t>(step * 7919 + group * 131 + rank));
  std::normal_distribution<float> n(0.f, 1.f);
  grad->assign(kDim, 0.f);
  float loss = 0.f;
  std::vector<float> x(kDim);
  for (int s = 0; s < kBatch; ++s) {
    float pred = 0.f, y = 0.f;
    for (int i = 0; i < kDim; ++i) {
      x[i] = n(gen);
      pred += w[i] * x[i];
      y += truth[i] * x[i];
    }
    const float err = pred - y;
    loss += err * err / kBatch;
    for (int i = 0; i < kDim; ++i) (*grad)[i] += 2.f * err * x[i] / kBatch;
  }
  return loss;
}

uint64_t Digest(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ULL;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Flags {
  std::string device = "cpu";
  int64_t steps = 200;
  int step_ms = 0;
  int restart_delay_ms = 0;
  int64_t kill_at_step = -1;
  int timeout_s = 30;
};

// Parses the flags; exits 2 with one line on a bad one.
Flags ParseFlags(int argc, char** argv) {
  Flags f;
  CLI::App app{"ft_hsdp: fault-tolerant HSDP over libmesh's fault-tolerance manager", "ft_hsdp"};
  app.add_option("--device", f.device, "cpu (Gloo) or cuda (NCCL for the replicate row)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--steps", f.steps, "Steps to train")->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  app.add_option("--step_ms,--step-ms", f.step_ms, "Extra time per step, ms (stands for compute)")
      ->check(CLI::Range(0, 60000));
  app.add_option("--restart_delay_ms,--restart-delay-ms", f.restart_delay_ms,
                 "A restarted worker (TORCHELASTIC_RESTART_COUNT > 0) waits this long first, ms (stands for "
                 "loading the model)")
      ->check(CLI::Range(0, 600000));
  app.add_option("--kill_at_step,--kill-at-step", f.kill_at_step,
                 "Group 1's rank 0 kills itself (SIGKILL) after committing this step, at its first start, as a "
                 "crashed worker would (for bench/replica_groups/step_loss.sh; the tests kill from outside)");
  app.add_option("--timeout_s,--timeout-s", f.timeout_s,
                 "Bound of each collective, mesh creation and the group's vote, seconds (MeshOptions::timeout)")
      ->check(CLI::Range(1, 3600));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (char& c : msg) c = c == '\n' ? ' ' : c;
    std::fprintf(stderr, "ft_hsdp: error: %s\n", msg.c_str());
    std::exit(2);
  }
  return f;
}

// One rank's training: its shard of the weights, and one step at a time.
struct Trainer {
  int group = 0;       // REPLICA_GROUP_ID.
  int rank = 0;        // In the group.
  bool first_start = true;
  int shards = 1;
  std::vector<float> shard;  // This rank's weights.
  std::vector<float> truth = TrueWeights();
  std::vector<float> w = std::vector<float>(kDim), grad, grad_shard;
  float loss = 0.f;

  // One step: quorum, forward and backward over the full weights, the
  // shard's gradient averaged over the group's ranks and the quorum's
  // groups, the vote; prints the step when committed.
  void Step(FaultToleranceManager& ft, ProcessGroup* shard_group, const Flags& f) {
    QuorumInfo q = examples::Must("ft_hsdp: quorum", ft.StartQuorum());
    if (q.healed) std::printf("healed to step %lld\n", static_cast<long long>(ft.step()));
    for (const std::string& g : q.left_out) {
      std::printf("replica group %s left out of quorum %lld\n", g.c_str(), static_cast<long long>(q.quorum_id));
    }
    const size_t n = shard.size();
    examples::Must("ft_hsdp: all_gather", shard_group->AllGather(shard.data(), w.data(), n));
    loss = Gradient(w, truth, ft.step(), q.replica_rank, rank, &grad);
    examples::Must("ft_hsdp: reduce_scatter", shard_group->ReduceScatter(grad.data(), grad_shard.data(), n));
    // A failure over the quorum's groups leaves the step out.
    const bool ok = ft.AllReduce(grad_shard.data(), n).ok();
    const float scale = 1.f / (static_cast<float>(shards) * static_cast<float>(q.replica_world_size));
    if (f.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(f.step_ms));
    if (examples::Must("ft_hsdp: commit", ft.ShouldCommit(ok))) {
      for (size_t i = 0; i < n; ++i) shard[i] -= kLr * grad_shard[i] * scale;
      std::printf("step %lld quorum %lld replicas %d time %.3f\n", static_cast<long long>(ft.step()),
                  static_cast<long long>(q.quorum_id), q.replica_world_size, NowSeconds());
      if (ft.step() == f.kill_at_step && group == 1 && rank == 0 && first_start) {
        std::fflush(stdout);
        raise(SIGKILL);
      }
    } else {
      std::printf("step %lld not committed (quorum %lld)\n", static_cast<long long>(ft.step() + 1),
                  static_cast<long long>(q.quorum_id));
    }
    std::fflush(stdout);
  }
};

}  // namespace

int main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  const World world = examples::Must("ft_hsdp", WorldFromEnv());
  Trainer t;
  t.shards = world.world_size;  // The group's ranks shard the weights.
  if (kDim % t.shards != 0) {
    std::fprintf(stderr, "ft_hsdp: error: %d ranks per replica group: must divide %d\n", t.shards, kDim);
    return 2;
  }
  t.rank = world.rank;
  t.shard.assign(kDim / t.shards, 0.f);
  t.grad_shard.resize(t.shard.size());
  const char* group_env = std::getenv("REPLICA_GROUP_ID");
  t.group = group_env ? std::atoi(group_env) : 0;
  const char* restart_env = std::getenv("TORCHELASTIC_RESTART_COUNT");
  t.first_start = restart_env == nullptr || std::atoi(restart_env) == 0;
  std::printf("ft_hsdp: group %d rank %d pid %d restart %s\n", t.group, world.rank, static_cast<int>(getpid()),
              restart_env ? restart_env : "0");
  std::fflush(stdout);
  if (!t.first_start && f.restart_delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(f.restart_delay_ms));
  }

  FaultToleranceOptions o;
  o.group_shape = {t.shards};
  o.group_dim_names = {"shard"};
  o.mesh.timeout = absl::Seconds(f.timeout_s);
  o.state_dict = [&t]() -> absl::StatusOr<std::string> {
    return std::string(reinterpret_cast<const char*>(t.shard.data()), t.shard.size() * sizeof(float));
  };
  o.load_state_dict = [&t](absl::string_view bytes) -> absl::Status {
    if (bytes.size() != t.shard.size() * sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrCat("state of ", bytes.size(), " bytes, expected ",
                                                     t.shard.size() * sizeof(float)));
    }
    std::memcpy(t.shard.data(), bytes.data(), bytes.size());
    return absl::OkStatus();
  };
  std::unique_ptr<FaultToleranceManager> ft = examples::Must("ft_hsdp", FaultToleranceManager::Create(f.device, o));
  ProcessGroup* shard_group = examples::Must("ft_hsdp", ft->group_mesh().GetGroup("shard"));

  // The loss of untrained (zero) weights: the check's reference, the same
  // for a group that joined late and healed.
  const float untrained = Gradient(std::vector<float>(kDim, 0.f), t.truth, 0, 0, world.rank, &t.grad);
  t.loss = untrained;
  while (ft->step() < f.steps) t.Step(*ft, shard_group, f);
  std::printf("final group %d rank %d step %lld loss %.6f weights %016llx\n", t.group, shard_group->rank(),
              static_cast<long long>(ft->step()), t.loss, static_cast<unsigned long long>(Digest(t.shard)));
  if (!(t.loss < untrained / 10)) {
    std::fprintf(stderr, "ft_hsdp: the model did not learn: loss %g untrained, %g at the last step\n", untrained,
                 t.loss);
    return 1;
  }
  return 0;
}
