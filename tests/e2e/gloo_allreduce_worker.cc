// A worker that builds a Gloo full mesh through meshrun's store (the gRPC
// Store client + the Gloo adapter) and checks an allreduce. Exit 0 on the
// right sum; prints "rank=R sum=S OK".
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/endpoint.h"
#include "common/gloo_store.h"
#include "client/grpc_store.h"
#include "common/net.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"

int main() {
  const int rank = std::atoi(std::getenv("RANK"));
  const int world = std::atoi(std::getenv("WORLD_SIZE"));
  auto options = meshrun::client::GrpcStoreOptionsFromEnv();
  if (!options.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, options.status().ToString().c_str());
    return 2;
  }
  auto store = meshrun::client::ConnectGrpcStore(*options);
  if (!store.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, store.status().ToString().c_str());
    return 2;
  }
  // Gloo's tcp device gets a numeric address: this node's advertised one
  // (the store is this node's proxy on a Unix socket, which says nothing
  // about the network).
  const char* node_addr = std::getenv("MESHRUN_NODE_ADDR");
  absl::StatusOr<std::string> addr = node_addr != nullptr ? absl::StatusOr<std::string>(node_addr)
                                                          : absl::StatusOr<std::string>("127.0.0.1");
  try {
    auto prefixed = std::make_shared<meshrun::PrefixStore>("gloo_test", *store);
    meshrun::GlooStoreAdapter adapter(prefixed, absl::Seconds(30));
    gloo::transport::tcp::attr attr;
    attr.hostname = *addr;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
    context->setTimeout(std::chrono::seconds(30));
    context->connectFullMesh(adapter, device);
    std::vector<float> data(1024, static_cast<float>(rank + 1));
    gloo::AllreduceOptions opts(context);
    opts.setOutput(data.data(), data.size());
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
    const float expected = world * (world + 1) / 2.0f;
    for (float v : data) {
      if (v != expected) {
        std::fprintf(stderr, "rank %d: allreduce gave %f, expected %f\n", rank, v, expected);
        return 1;
      }
    }
    std::printf("rank=%d sum=%.0f OK\n", rank, expected);
  } catch (const gloo::Exception& e) {
    std::fprintf(stderr, "rank %d: gloo: %s\n", rank, e.what());
    return 1;
  }
  return 0;
}
