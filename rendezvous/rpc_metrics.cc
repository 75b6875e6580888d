#include "rendezvous/rpc_metrics.h"

#include <grpcpp/support/status.h>

#include <chrono>
#include <string_view>

namespace meshrun::rendezvous {
namespace {

class RpcMetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(ServerMetrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      metrics_->RecordRpc(method_, CodeName(status.error_code()), seconds);
    }
    methods->Proceed();
  }

 private:
  ServerMetrics* metrics_;
  std::string method_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

std::string MethodLabel(const char* full_method) {
  std::string_view m = full_method == nullptr ? "" : full_method;
  constexpr std::string_view kOurs = "/meshrun.v1.Rendezvous/";
  if (m.substr(0, kOurs.size()) == kOurs) return std::string(m.substr(kOurs.size()));
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

grpc::experimental::Interceptor* RpcMetricsInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new RpcMetricsInterceptor(metrics_, MethodLabel(info->method()));
}

}  // namespace meshrun::rendezvous
