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

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cpu";
  int64_t steps = 200;
  int step_ms = 0;
  int restart_delay_ms = 0;
  int64_t kill_at_step = -1;
  int timeout_s = 30;
  CLI::App app{"ft_hsdp: fault-tolerant HSDP over libmesh's fault-tolerance manager", "ft_hsdp"};
  app.add_option("--device", device, "cpu (Gloo) or cuda (NCCL for the replicate row)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--steps", steps, "Steps to train")->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  app.add_option("--step_ms,--step-ms", step_ms, "Extra time per step, ms (stands for compute)")
      ->check(CLI::Range(0, 60000));
  app.add_option("--restart_delay_ms,--restart-delay-ms", restart_delay_ms,
                 "A restarted worker (TORCHELASTIC_RESTART_COUNT > 0) waits this long first, ms (stands for "
                 "loading the model)")
      ->check(CLI::Range(0, 600000));
  app.add_option("--kill_at_step,--kill-at-step", kill_at_step,
                 "Group 1's rank 0 kills itself (SIGKILL) after committing this step, at its first start, as a "
                 "crashed worker would (for bench/replica_groups/step_loss.sh; the tests kill from outside)");
  app.add_option("--timeout_s,--timeout-s", timeout_s,
                 "Bound of each collective, mesh creation and the group's vote, seconds (MeshOptions::timeout)")
      ->check(CLI::Range(1, 3600));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (char& c : msg) c = c == '\n' ? ' ' : c;
    std::fprintf(stderr, "ft_hsdp: error: %s\n", msg.c_str());
    return 2;
  }
  const World world = examples::Must("ft_hsdp", WorldFromEnv());
  const int shards = world.world_size;  // The group's ranks shard the weights.
  if (kDim % shards != 0) {
    std::fprintf(stderr, "ft_hsdp: error: %d ranks per replica group: must divide %d\n", shards, kDim);
    return 2;
  }
  const int shard_size = kDim / shards;
  const char* group_env = std::getenv("REPLICA_GROUP_ID");
  const int group = group_env ? std::atoi(group_env) : 0;
  const char* restart_env = std::getenv("TORCHELASTIC_RESTART_COUNT");
  std::printf("ft_hsdp: group %d rank %d pid %d restart %s\n", group, world.rank, static_cast<int>(getpid()),
              restart_env ? restart_env : "0");
  std::fflush(stdout);
  if (restart_env != nullptr && std::atoi(restart_env) > 0 && restart_delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(restart_delay_ms));
  }

  std::vector<float> shard(shard_size, 0.f);  // This rank's weights.
  FaultToleranceOptions o;
  o.group_shape = {shards};
  o.group_dim_names = {"shard"};
  o.mesh.timeout = absl::Seconds(timeout_s);
  o.state_dict = [&]() -> absl::StatusOr<std::string> {
    return std::string(reinterpret_cast<const char*>(shard.data()), shard.size() * sizeof(float));
  };
  o.load_state_dict = [&](absl::string_view bytes) -> absl::Status {
    if (bytes.size() != shard.size() * sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrCat("state of ", bytes.size(), " bytes, expected ",
                                                     shard.size() * sizeof(float)));
    }
    std::memcpy(shard.data(), bytes.data(), bytes.size());
    return absl::OkStatus();
  };
  std::unique_ptr<FaultToleranceManager> ft = examples::Must("ft_hsdp", FaultToleranceManager::Create(device, o));
  ProcessGroup* shard_group = examples::Must("ft_hsdp", ft->group_mesh().GetGroup("shard"));
  const int shard_rank = shard_group->rank();

  const std::vector<float> truth = TrueWeights();
  std::vector<float> w(kDim), grad, grad_shard(shard_size);
  // The loss of untrained (zero) weights: the check's reference, the same
  // for a group that joined late and healed.
  const float first_loss = Gradient(std::vector<float>(kDim, 0.f), truth, 0, 0, world.rank, &grad);
  float loss = first_loss;
  while (ft->step() < steps) {
    QuorumInfo q = examples::Must("ft_hsdp: quorum", ft->StartQuorum());
    if (q.healed) std::printf("healed to step %lld\n", static_cast<long long>(ft->step()));
    for (const std::string& g : q.left_out) std::printf("replica group %s left out of quorum %lld\n", g.c_str(),
                                                          static_cast<long long>(q.quorum_id));
    // Forward and backward: the full weights from the shards.
    examples::Must("ft_hsdp: all_gather", shard_group->AllGather(shard.data(), w.data(), shard_size));
    loss = Gradient(w, truth, ft->step(), q.replica_rank, world.rank, &grad);
    // The shard's gradient, averaged over the group's ranks ...
    examples::Must("ft_hsdp: reduce_scatter", shard_group->ReduceScatter(grad.data(), grad_shard.data(), shard_size));
    // ... and over the quorum's groups. A failure here leaves the step out.
    bool ok = true;
    if (ft->AllReduce(grad_shard.data(), grad_shard.size()).ok()) {
      const float scale = 1.f / (static_cast<float>(shards) * static_cast<float>(q.replica_world_size));
      for (float& g : grad_shard) g *= scale;
    } else {
      ok = false;
    }
    if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    if (examples::Must("ft_hsdp: commit", ft->ShouldCommit(ok))) {
      for (int i = 0; i < shard_size; ++i) shard[i] -= kLr * grad_shard[i];
      std::printf("step %lld quorum %lld replicas %d time %.3f\n", static_cast<long long>(ft->step()),
                  static_cast<long long>(q.quorum_id), q.replica_world_size, NowSeconds());
      if (ft->step() == kill_at_step && group == 1 && world.rank == 0 &&
          (restart_env == nullptr || std::atoi(restart_env) == 0)) {
        std::fflush(stdout);
        raise(SIGKILL);
      }
    } else {
      std::printf("step %lld not committed (quorum %lld)\n", static_cast<long long>(ft->step() + 1),
                  static_cast<long long>(q.quorum_id));
    }
    std::fflush(stdout);
  }
  std::printf("final group %d rank %d step %lld loss %.6f weights %016llx\n", group, shard_rank,
              static_cast<long long>(ft->step()), loss, static_cast<unsigned long long>(Digest(shard)));
  if (!(loss < first_loss / 10)) {
    std::fprintf(stderr, "ft_hsdp: the model did not learn: loss %g untrained, %g at the last step\n", first_loss,
                 loss);
    return 1;
  }
  return 0;
}
