// bench/mesh_init worker: the time from just before InitDeviceMesh until one
// allreduce has completed on every dimension, on this rank. Rank 0 prints
// the maximum over ranks and the store requests per rank per dimension:
//   MESH_INIT shape=2,4 max_ms=12.3 kv_per_rank_per_dim=4.00
// Run under meshrun: meshrun --standalone --nproc_per_node=8 mesh_init_bench 2,4
//
// With a second argument N, every rank then runs N one-element allreduces
// on the last dimension, back to back, and the reporting rank prints the
// median and 90th percentile of its own (steady-state collective latency):
//   ALLREDUCE_LOOP shape=2,4 dim=1 n=300 p50_ms=0.31 p90_ms=0.52
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include <grpcpp/grpcpp.h>

#include "absl/time/clock.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "client/grpc_store.h"
#include "common/grpc_tls.h"
#include "client/status.h"
#include "meshrun/device_mesh.h"

using namespace meshrun::mesh;

int main(int argc, char** argv) {
  std::string shape_text = argc > 1 ? argv[1] : "2,4";
  std::vector<int> shape;
  for (absl::string_view s : absl::StrSplit(shape_text, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(s, &v)) {
      std::fprintf(stderr, "mesh_init_bench: bad shape '%s'\n", shape_text.c_str());
      return 2;
    }
    shape.push_back(v);
  }
  auto world = WorldFromEnv();
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().ToString().c_str());
    return 1;
  }
  // Every rank meets at a store barrier before the clock starts, so that
  // the process start-up skew of 8 ranks on a busy machine is not counted
  // (bench/torch_mesh_init.py does the same for PyTorch): one Add each, one
  // Set by the last to arrive, one Get each. The barrier talks to the server
  // over a connection of its own (a local subchannel pool), as PyTorch's
  // barrier uses a TCPStore of its own: InitDeviceMesh then opens the
  // process's store channel inside the timed part, as PyTorch's
  // init_process_group connects its store inside it. Under --standalone the
  // rendezvous server is this job's own and nothing else uses its store, so
  // the mesh's requests are the server's KV counts at the end less those of
  // the barrier.
  // TLS as the worker's environment says (MESHRUN_TLS_*).
  meshrun::TlsMaterial tls;
  if (auto env_store = meshrun::client::GrpcStoreOptionsFromEnv(); env_store.ok()) tls = env_store->tls;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(world->store_endpoint, meshrun::ClientCredentials(tls), args);
  auto stub = meshrun::v1::Store::NewStub(channel);
  auto call = [&](auto method, auto& req, auto& resp, absl::Duration limit) {
    req.mutable_run()->set_run_id(world->run_id);
    req.mutable_run()->set_token(world->token);
    req.set_round(world->round);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + limit));
    return ((*stub).*method)(&ctx, req, &resp).ok();
  };
  meshrun::v1::KvAddRequest add;
  meshrun::v1::KvAddResponse added;
  add.set_key("bench/arrived");
  add.set_delta(1);
  if (!call(&meshrun::v1::Store::Stub::KvAdd, add, added, absl::Seconds(60))) return 1;
  const bool reporter = added.value() == world->world_size;
  if (reporter) {
    meshrun::v1::KvSetRequest set;
    meshrun::v1::KvSetResponse set_resp;
    set.set_key("bench/go");
    set.set_value("1");
    if (!call(&meshrun::v1::Store::Stub::KvSet, set, set_resp, absl::Seconds(60))) return 1;
  }
  meshrun::v1::KvGetRequest get;
  meshrun::v1::KvGetResponse got;
  get.set_key("bench/go");
  get.set_wait_ms(60000);
  if (!call(&meshrun::v1::Store::Stub::KvGet, get, got, absl::Seconds(70))) return 1;
  const auto start = std::chrono::steady_clock::now();
  auto mesh = InitDeviceMesh("cpu", shape, {}, *world);
  if (!mesh.ok()) {
    std::fprintf(stderr, "%s\n", mesh.status().ToString().c_str());
    return 1;
  }
  for (int d = 0; d < mesh->ndim(); ++d) {
    float v = 1;
    if (!(*mesh->GetGroup(d))->AllReduce(&v, 1).ok()) return 1;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // The maximum over ranks: a max over every dimension reaches every rank.
  double worst = ms;
  for (int d = 0; d < mesh->ndim(); ++d) {
    if (!(*mesh->GetGroup(d))->AllReduce(&worst, 1, ReduceOp::kMax).ok()) return 1;
  }
  // The last rank to reach the barrier reports, once every rank is done.
  if (reporter) {
    auto counts = meshrun::client::QueryRequestCounts(world->store_endpoint, world->token, tls);
    if (!counts.ok()) return 1;
    std::map<std::string, int64_t> mesh_kv;
    for (const auto& [m, n] : *counts) {
      if (m.rfind("Kv", 0) == 0) mesh_kv[m] = n;
    }
    mesh_kv["KvAdd"] -= world->world_size;
    mesh_kv["KvGet"] -= world->world_size;
    mesh_kv["KvSet"] -= 1;
    int64_t kv = 0;
    std::string by_method;
    for (const auto& [m, n] : mesh_kv) {
      kv += n;
      if (n != 0) by_method += " " + m + "=" + std::to_string(n);
    }
    std::printf("MESH_INIT shape=%s max_ms=%.2f kv_per_rank_per_dim=%.2f%s\n", shape_text.c_str(), worst,
                static_cast<double>(kv) / (world->world_size * mesh->ndim()), by_method.c_str());
  }
  int loops = 0;
  if (argc > 2 && (!absl::SimpleAtoi(argv[2], &loops) || loops < 1 || loops > 100000)) {
    std::fprintf(stderr, "mesh_init_bench: allreduce count '%s': allowed 1..100000\n", argv[2]);
    return 2;
  }
  if (loops > 0) {
    ProcessGroup* g = *mesh->GetGroup(mesh->ndim() - 1);
    std::vector<double> lat;
    for (int k = 0; k < loops; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      float v = 1;
      if (!g->AllReduce(&v, 1).ok()) return 1;
      lat.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(lat.begin(), lat.end());
    if (reporter) {
      std::printf("ALLREDUCE_LOOP shape=%s dim=%d n=%d p50_ms=%.3f p90_ms=%.3f\n", shape_text.c_str(),
                  mesh->ndim() - 1, loops, lat[lat.size() / 2], lat[lat.size() * 9 / 10]);
    }
  }
  return 0;
}
