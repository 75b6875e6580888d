// The gRPC side of the connection count (traffic_counters.h): a server
// interceptor that reports the peer of every call. Workers' connections are
// short-lived, so sampling the open sockets would miss them; every
// connection that carries a call passes through here. Thin adapter.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include "rendezvous/traffic_counters.h"

namespace meshrun::rendezvous {

class TrafficInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `counters` must outlive the server.
  explicit TrafficInterceptorFactory(TrafficCounters* counters) : counters_(counters) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override;

 private:
  TrafficCounters* counters_;
};

}  // namespace meshrun::rendezvous
