// GPU tests of libmesh's NCCL backend, tagged [gpu]. Without a CUDA device
// the program prints why and exits 77, which CTest reports as skipped.
// On a one-GPU machine a mesh has one rank: shape (1, 1, 1).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <vector>

#include "meshrun/device_mesh.h"
#include "rendezvous/server.h"

using namespace meshrun::mesh;

namespace {

struct Fixture {
  std::unique_ptr<meshrun::rendezvous::RendezvousServer> server;
  World world;
  Fixture() {
    meshrun::rendezvous::ServerOptions o;
    o.host = "127.0.0.1";
    server = std::move(*meshrun::rendezvous::RendezvousServer::Start(o));
    world.store_endpoint = server->endpoint();
    world.run_id = "gpu-test";
  }
};

}  // namespace

TEST_CASE("a (1, 1, 1) NCCL mesh: one communicator per dimension, collectives on device", "[gpu]") {
  Fixture f;
  auto mesh = InitDeviceMesh("cuda", {1, 1, 1}, {"replicate", "shard", "tp"}, f.world);
  REQUIRE(mesh.ok());
  auto groups = mesh->GetAllGroups();
  REQUIRE(groups.ok());
  REQUIRE(groups->size() == 3);
  float* d = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), 4 * sizeof(float)) == cudaSuccess);
  std::vector<float> h = {1, 2, 3, 4};
  cudaMemcpy(d, h.data(), sizeof(float) * 4, cudaMemcpyHostToDevice);
  for (ProcessGroup* g : *groups) {
    CHECK(g->backend() == "nccl");
    CHECK(g->AllReduce(d, 4, ReduceOp::kSum).ok());
    CHECK(g->Broadcast(d, 4, 0).ok());
    CHECK(g->Barrier().ok());
    // The raw handle is a working blocking communicator.
    ncclComm_t comm = static_cast<ncclComm_t>(g->native_handle());
    int count = 0;
    CHECK(ncclCommCount(comm, &count) == ncclSuccess);
    CHECK(count == 1);
    CHECK(ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
  }
  cudaDeviceSynchronize();
  cudaMemcpy(h.data(), d, sizeof(float) * 4, cudaMemcpyDeviceToHost);
  CHECK(h == std::vector<float>{1, 2, 3, 4});
  cudaFree(d);
  DeviceMesh sub = *(*mesh)[std::vector<std::string>{"replicate", "shard"}];
  auto flat = sub.Flatten("dp");
  REQUIRE(flat.ok());
  CHECK(*flat->GetGroup() == *sub.Flatten("dp")->GetGroup());
  mesh->Abort();
  CHECK(absl::IsAborted((*groups)[0]->Barrier()));
}

TEST_CASE("nccl_split: communicators split from one world communicator", "[gpu]") {
  Fixture f;
  MeshOptions o;
  o.nccl_split = true;
  auto mesh = InitDeviceMesh("cuda", {1, 1, 1}, {"replicate", "shard", "tp"}, f.world, o);
  REQUIRE(mesh.ok());
  auto groups = mesh->GetAllGroups();
  REQUIRE(groups.ok());
  REQUIRE(groups->size() == 3);
  int* d = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(int)) == cudaSuccess);
  int h = 5;
  cudaMemcpy(d, &h, sizeof(int), cudaMemcpyHostToDevice);
  for (ProcessGroup* g : *groups) {
    int count = 0;
    CHECK(ncclCommCount(static_cast<ncclComm_t>(g->native_handle()), &count) == ncclSuccess);
    CHECK(count == 1);
    CHECK(g->AllReduce(d, 1, DataType::kInt32, ReduceOp::kMax).ok());
  }
  cudaDeviceSynchronize();
  cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
  CHECK(h == 5);
  cudaFree(d);
}

TEST_CASE("cuda meshes are validated before any NCCL call", "[gpu]") {
  Fixture f;
  World w = f.world;
  w.local_rank = 7;
  w.local_world_size = 8;
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count == 1) {
    // One visible device per process is allowed: LOCAL_RANK 7 uses device 0,
    // but 8 local ranks publishing one bus id each are not checked here.
    SUCCEED();
  } else {
    auto mesh = InitDeviceMesh("cuda", {1}, {"x"}, w);
    REQUIRE_FALSE(mesh.ok());
  }
  auto bad = InitDeviceMesh("cuda:0", {1}, {"x"}, f.world);
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()).find("with index is not supported") != std::string::npos);
}

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no CUDA device visible\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
