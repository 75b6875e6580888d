// Tries the store as a worker would, with the token from the environment:
// prints "set=<status> get=<status>" and exits 0 when both worked.
#include <cstdio>

#include "client/grpc_store.h"

int main() {
  auto options = meshrun::client::GrpcStoreOptionsFromEnv();
  if (!options.ok()) {
    std::printf("options=%s\n", options.status().ToString().c_str());
    return 2;
  }
  options->connect_timeout = absl::Seconds(5);
  auto store = meshrun::client::ConnectGrpcStore(*options);
  if (!store.ok()) {
    std::printf("connect=%s\n", store.status().ToString().c_str());
    return 2;
  }
  absl::Status set = (*store)->Set("probe", "value");
  auto get = (*store)->Get("probe", absl::ZeroDuration());
  std::printf("set=%s get=%s\n", absl::StatusCodeToString(set.code()).c_str(),
              absl::StatusCodeToString(get.status().code()).c_str());
  return set.ok() && get.ok() ? 0 : 1;
}
