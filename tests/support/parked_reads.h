// The store reads parked in a run on a server, as its Admin Status counts
// them: what tests wait for (a state) before acting on a parked read.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <grpcpp/grpcpp.h>

#include "meshrun/proto/rendezvous.grpc.pb.h"

namespace meshrun::testing {

// The store reads parked in `run` on the server at `endpoint` (plaintext,
// no token); -1 when it cannot say (within 5 s).
inline int64_t ParkedReads(const std::string& endpoint, const std::string& run) {
  auto stub = v1::Admin::NewStub(grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::StatusRequest req;
  req.mutable_run()->set_run_id(run);
  v1::StatusResponse resp;
  if (!stub->Status(&ctx, req, &resp).ok() || resp.runs_size() != 1) return -1;
  return resp.runs(0).kv_waiters();
}

}  // namespace meshrun::testing
