// The server's one gRPC interceptor: every call, on arrival and at its
// answer, feeds the domain counters that know nothing of gRPC:
// - ServerMetrics (metrics.h): method, status code, and time from arrival
//   to answer (meshrun_rpcs_total, meshrun_rpc_duration_seconds);
// - TrafficCounters (traffic_counters.h): the peer of every call, which
//   counts connections accepted per client address:port (workers'
//   connections are short-lived, so sampling open sockets would miss them;
//   every connection that carries a call passes through here);
// - the calls open on one server generation (server.cc retires a replaced
//   generation once none is open).
// Thin adapter: the counting is in the domain classes.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "rendezvous/server/metrics.h"
#include "rendezvous/server/traffic_counters.h"

namespace meshrun::rendezvous {

class CallInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `metrics` and `traffic` must outlive the server; `open_calls` is raised
  // while each call's interceptor lives (from arrival until gRPC is done
  // with the call). Any of them may be null: not fed.
  CallInterceptorFactory(ServerMetrics* metrics, TrafficCounters* traffic,
                         std::shared_ptr<std::atomic<int64_t>> open_calls)
      : metrics_(metrics), traffic_(traffic), open_calls_(std::move(open_calls)) {}
  // One interceptor per call (gRPC owns and deletes it). Thread-safe.
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override;

 private:
  ServerMetrics* metrics_;
  TrafficCounters* traffic_;
  std::shared_ptr<std::atomic<int64_t>> open_calls_;
};

// "Join" for "/meshrun.v1.Rendezvous/Join", "KvSet" for
// "/meshrun.v1.Store/KvSet", "Status" for "/meshrun.v1.Admin/Status"; other
// services keep their full
// name ("grpc.health.v1.Health/Check"); "" for null. Pure.
std::string MethodLabel(const char* full_method);
// "OK", "UNAVAILABLE", ... for a gRPC status code; "CODE_<n>" for one
// outside 0..16. Pure.
std::string CodeName(int code);

}  // namespace meshrun::rendezvous
