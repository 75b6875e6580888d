#include "rendezvous/grpc/call_interceptor.h"

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <string_view>

#include "absl/time/clock.h"

namespace meshrun::rendezvous {
namespace {

using grpc::experimental::InterceptionHookPoints;

class CallInterceptor : public grpc::experimental::Interceptor {
 public:
  CallInterceptor(ServerMetrics* metrics, TrafficCounters* traffic, std::shared_ptr<std::atomic<int64_t>> open_calls,
                  grpc::experimental::ServerRpcInfo* info)
      : metrics_(metrics),
        traffic_(traffic),
        open_calls_(std::move(open_calls)),
        info_(info),
        method_(metrics != nullptr ? MethodLabel(info->method()) : ""),
        start_(std::chrono::steady_clock::now()) {
    if (open_calls_) open_calls_->fetch_add(1);
  }
  ~CallInterceptor() override {
    if (open_calls_) open_calls_->fetch_sub(1);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (traffic_ != nullptr && methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      if (grpc::ServerContextBase* ctx = info_->server_context()) traffic_->OnCall(ctx->peer(), absl::Now());
    }
    if (metrics_ != nullptr && methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      metrics_->RecordRpc(method_, CodeName(status.error_code()), seconds);
    }
    methods->Proceed();
  }

 private:
  ServerMetrics* metrics_;
  TrafficCounters* traffic_;
  std::shared_ptr<std::atomic<int64_t>> open_calls_;
  grpc::experimental::ServerRpcInfo* info_;
  std::string method_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

std::string MethodLabel(const char* full_method) {
  std::string_view m = full_method == nullptr ? "" : full_method;
  // meshrun's own three services: the method's name alone (each name is
  // used by one of them).
  for (std::string_view ours : {"/meshrun.v1.Rendezvous/", "/meshrun.v1.Store/", "/meshrun.v1.Admin/"}) {
    if (m.substr(0, ours.size()) == ours) return std::string(m.substr(ours.size()));
  }
  if (!m.empty() && m[0] == '/') m.remove_prefix(1);
  return std::string(m);
}

std::string CodeName(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  if (code >= 0 && code < static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) return kNames[code];
  return "CODE_" + std::to_string(code);
}

grpc::experimental::Interceptor* CallInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new CallInterceptor(metrics_, traffic_, open_calls_, info);
}

}  // namespace meshrun::rendezvous
