#include "common/grpc_log.h"

#include <grpc/support/log.h>

#include <atomic>
#include <string>

#include "common/logging.h"

namespace meshrun {
namespace {

std::atomic<GrpcLogObserver> observer_fn{nullptr};

void ToLogger(gpr_log_func_args* args) {
  const char* file = args->file != nullptr ? args->file : "";
  const char* message = args->message != nullptr ? args->message : "";
  if (GrpcLogObserver o = observer_fn.load(std::memory_order_acquire)) o(file, message);
  Logger("grpc")->debug("{}:{}: {}", file, args->line, message);
}

}  // namespace

void RouteGrpcLogs(GrpcLogObserver observer) {
  if (observer != nullptr) observer_fn.store(observer, std::memory_order_release);
  static const bool routed = (gpr_set_log_function(&ToLogger), true);
  (void)routed;
}

}  // namespace meshrun
