// The gRPC side of the server's metrics: a server interceptor that records
// every RPC's method, status code and time from arrival to answer in
// ServerMetrics (metrics.h). Thin adapter; the counting is in metrics.cc.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include "rendezvous/metrics.h"

namespace meshrun::rendezvous {

class RpcMetricsInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `metrics` must outlive the server.
  explicit RpcMetricsInterceptorFactory(ServerMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override;

 private:
  ServerMetrics* metrics_;
};

// "Join" for "/meshrun.v1.Rendezvous/Join"; other services keep their full
// name ("grpc.health.v1.Health/Check"). Pure.
std::string MethodLabel(const char* full_method);
// "OK", "UNAVAILABLE", ... for a gRPC status code. Pure.
std::string CodeName(int code);

}  // namespace meshrun::rendezvous
