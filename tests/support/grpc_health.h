// A gRPC health client for tests: calls the standard
// /grpc.health.v1.Health/Check through a generic stub, so no health proto
// needs generating (Debian ships none). The two messages are tiny and
// encoded by hand: HealthCheckRequest{1: string service},
// HealthCheckResponse{1: enum status} (1 SERVING, 2 NOT_SERVING).
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <future>
#include <string>

namespace meshrun::testing {

struct HealthAnswer {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  int status = -1;  // The response's status field; -1 when the call failed.
};

inline HealthAnswer CheckHealth(const std::string& target, const std::string& service, double timeout_s = 5) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  std::string req;
  if (!service.empty()) {
    req.push_back(0x0A);  // Field 1, length-delimited.
    req.push_back(static_cast<char>(service.size()));  // Names under 128 bytes: one varint byte.
    req += service;
  }
  grpc::Slice slice(req);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(s); });
  grpc::Status s = done.get_future().get();
  HealthAnswer a;
  a.code = s.error_code();
  if (!s.ok()) return a;
  std::vector<grpc::Slice> slices;
  (void)response.Dump(&slices);
  std::string bytes;
  for (const auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  a.status = 0;  // Absent field: UNKNOWN.
  if (bytes.size() >= 2 && bytes[0] == 0x08) a.status = static_cast<unsigned char>(bytes[1]);
  return a;
}

}  // namespace meshrun::testing
