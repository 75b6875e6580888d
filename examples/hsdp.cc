// Hybrid sharded data parallelism (HSDP) on a (2, 4) mesh named
// (replicate, shard): a 10 -> 10 -> 5 MLP (165 parameters, padded to 168 so
// that 4 shards are equal) trained 20 SGD steps. Parameters are sharded over
// "shard" (all-gathered before use, gradients reduce-scattered) and
// replicated over "replicate" (gradient shards allreduced). The loss is the
// mean over the global batch. Every rank checks the final parameters against
// a single-process run of the same steps (within 1e-5) and that the loss at
// least halved.
#include <cmath>
#include <random>

#include "example_util.h"

using namespace meshrun::mesh;

namespace {

constexpr int kIn = 10, kHidden = 10, kOut = 5;
constexpr int kParams = kHidden * kIn + kHidden + kOut * kHidden + kOut;  // 165
constexpr int kGlobalBatch = 32;
constexpr int kSteps = 20;
constexpr float kLr = 0.1f;

struct Batch {
  std::vector<float> x, y;  // Row-major: samples x kIn, samples x kOut.
};

// The global batch, the same on every rank: y = A x for a fixed A.
Batch GlobalBatch() {
  std::mt19937 gen(1234);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> a(kOut * kIn);
  for (auto& v : a) v = n(gen) * 0.5f;
  Batch b;
  b.x.resize(kGlobalBatch * kIn);
  b.y.assign(kGlobalBatch * kOut, 0.f);
  for (auto& v : b.x) v = n(gen);
  for (int s = 0; s < kGlobalBatch; ++s) {
    for (int o = 0; o < kOut; ++o) {
      for (int i = 0; i < kIn; ++i) b.y[s * kOut + o] += a[o * kIn + i] * b.x[s * kIn + i];
    }
  }
  return b;
}

std::vector<float> InitialParams() {
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  std::vector<float> p(kParams);
  for (auto& v : p) v = u(gen);
  return p;
}

// Loss (sum over samples [begin, end) of 0.5 * |f(x) - y|^2, divided by the
// global batch) and its gradient with respect to the 165 parameters.
float LossAndGrad(const std::vector<float>& p, const Batch& b, int begin, int end, std::vector<float>* grad) {
  const float* w1 = p.data();
  const float* b1 = w1 + kHidden * kIn;
  const float* w2 = b1 + kHidden;
  const float* b2 = w2 + kOut * kHidden;
  grad->assign(kParams, 0.f);
  float* gw1 = grad->data();
  float* gb1 = gw1 + kHidden * kIn;
  float* gw2 = gb1 + kHidden;
  float* gb2 = gw2 + kOut * kHidden;
  float loss = 0;
  for (int s = begin; s < end; ++s) {
    const float* x = &b.x[s * kIn];
    float h[kHidden], a[kHidden], out[kOut], d_out[kOut], d_a[kHidden];
    for (int j = 0; j < kHidden; ++j) {
      h[j] = b1[j];
      for (int i = 0; i < kIn; ++i) h[j] += w1[j * kIn + i] * x[i];
      a[j] = h[j] > 0 ? h[j] : 0;
    }
    for (int o = 0; o < kOut; ++o) {
      out[o] = b2[o];
      for (int j = 0; j < kHidden; ++j) out[o] += w2[o * kHidden + j] * a[j];
      float diff = out[o] - b.y[s * kOut + o];
      loss += 0.5f * diff * diff / kGlobalBatch;
      d_out[o] = diff / kGlobalBatch;
    }
    for (int j = 0; j < kHidden; ++j) d_a[j] = 0;
    for (int o = 0; o < kOut; ++o) {
      gb2[o] += d_out[o];
      for (int j = 0; j < kHidden; ++j) {
        gw2[o * kHidden + j] += d_out[o] * a[j];
        d_a[j] += d_out[o] * w2[o * kHidden + j];
      }
    }
    for (int j = 0; j < kHidden; ++j) {
      float d_h = h[j] > 0 ? d_a[j] : 0;
      gb1[j] += d_h;
      for (int i = 0; i < kIn; ++i) gw1[j * kIn + i] += d_h * x[i];
    }
  }
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  examples::Args args = examples::ParseArgs("hsdp", argc, argv, {2, 4});
  DeviceMesh mesh = examples::Must("init_device_mesh",
                                   InitDeviceMesh(args.device, args.shape, {"replicate", "shard"}));
  ProcessGroup* shard = examples::Must("group", mesh.GetGroup("shard"));
  ProcessGroup* replicate = examples::Must("group", mesh.GetGroup("replicate"));
  const DeviceType dev = mesh.device_type();
  const int world = mesh.size();
  const int rank = mesh.rank();
  const int shards = shard->size();
  const int shard_len = (kParams + shards - 1) / shards;  // 42: 168 padded
  const int padded = shard_len * shards;
  const Batch batch = GlobalBatch();
  if (kGlobalBatch % world != 0) {
    std::fprintf(stderr, "hsdp: the global batch of %d samples cannot be split over %d ranks\n", kGlobalBatch, world);
    return 2;
  }
  const int per_rank = kGlobalBatch / world;
  const int begin = rank * per_rank, end = begin + per_rank;

  // Each rank keeps only its shard of the (padded) parameters.
  std::vector<float> full = InitialParams();
  full.resize(padded, 0.f);
  std::vector<float> mine(full.begin() + shard->rank() * shard_len, full.begin() + (shard->rank() + 1) * shard_len);

  float first_loss = 0, last_loss = 0;
  std::vector<float> grad;
  for (int step = 0; step < kSteps; ++step) {
    // All-gather the parameters over "shard".
    std::vector<float> gathered(padded);
    examples::Must("allgather", examples::Staged<float>(dev, mine, gathered, [&](float* in, float* out) {
      return shard->AllGather(in, out, shard_len);
    }));
    gathered.resize(kParams);
    std::vector<float> loss = {LossAndGrad(gathered, batch, begin, end, &grad)};
    grad.resize(padded, 0.f);
    if (rank == args.corrupt_rank) grad[0] += 1.0f;
    // Reduce-scatter the gradient over "shard", then allreduce the shard
    // over "replicate": the global gradient of this rank's shard.
    std::vector<float> grad_shard(shard_len);
    examples::Must("reduce_scatter", examples::Staged<float>(dev, grad, grad_shard, [&](float* in, float* out) {
      return shard->ReduceScatter(in, out, shard_len);
    }));
    examples::Must("allreduce", examples::AllReduce(dev, replicate, grad_shard));
    for (int i = 0; i < shard_len; ++i) mine[i] -= kLr * grad_shard[i];
    // The global loss: sum over both dimensions.
    examples::Must("allreduce", examples::AllReduce(dev, shard, loss));
    examples::Must("allreduce", examples::AllReduce(dev, replicate, loss));
    if (step == 0) first_loss = loss[0];
    last_loss = loss[0];
  }
  std::vector<float> final_params(padded);
  examples::Must("allgather", examples::Staged<float>(dev, mine, final_params, [&](float* in, float* out) {
    return shard->AllGather(in, out, shard_len);
  }));

  // The same steps in one process, on the whole batch.
  std::vector<float> ref = InitialParams();
  for (int step = 0; step < kSteps; ++step) {
    LossAndGrad(ref, batch, 0, kGlobalBatch, &grad);
    for (int i = 0; i < kParams; ++i) ref[i] -= kLr * grad[i];
  }
  float max_diff = 0;
  for (int i = 0; i < kParams; ++i) max_diff = std::max(max_diff, std::fabs(final_params[i] - ref[i]));
  bool ok = max_diff <= 1e-5f && last_loss <= first_loss / 2;
  std::printf("rank=%d params=%d padded=%d first_loss=%.6f last_loss=%.6f max_param_diff=%.2e %s\n", rank, kParams,
              padded, first_loss, last_loss, max_diff, ok ? "OK" : "FAILED");
  std::fflush(stdout);
  return ok ? 0 : 1;
}
