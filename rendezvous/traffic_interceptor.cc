#include "rendezvous/traffic_interceptor.h"

#include <grpcpp/server_context.h>

#include "absl/time/clock.h"

namespace meshrun::rendezvous {
namespace {

class TrafficInterceptor : public grpc::experimental::Interceptor {
 public:
  TrafficInterceptor(TrafficCounters* counters, grpc::experimental::ServerRpcInfo* info)
      : counters_(counters), info_(info) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      if (grpc::ServerContextBase* ctx = info_->server_context()) counters_->OnCall(ctx->peer(), absl::Now());
    }
    methods->Proceed();
  }

 private:
  TrafficCounters* counters_;
  grpc::experimental::ServerRpcInfo* info_;
};

}  // namespace

grpc::experimental::Interceptor* TrafficInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new TrafficInterceptor(counters_, info);
}

}  // namespace meshrun::rendezvous
