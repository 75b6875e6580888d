#include "common/env_registry.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace meshrun::env {
namespace {

constexpr Var kAll[] = {
    kRank, kLocalRank, kWorldSize, kLocalWorldSize, kGroupRank, kGroupWorldSize,
    kRoleRank, kRoleName, kRoleWorldSize, kMasterAddr, kMasterPort, kRunId,
    kRestartCount, kMaxRestarts, kSignalsToHandle, kUseAgentStore, kTorchftLighthouse, kReplicaGroupId, kNumReplicaGroups, kErrorFile, kOmpNumThreads,
    kTorchNcclAsyncErrorHandling, kNcclAsyncErrorHandling, kStoreEndpoint,
    kMeshrunRunId, kRound, kNodeRank, kNodeAddr, kGlooSocketIfname, kPermanentFailureExitCode, kToken, kTokenFile,
    kTlsCert, kTlsKey, kTlsCa, kPythonExec, kLogLevel, kShutdownTimeoutEnv, kCudaVisibleDevices,
    kLogLinePrefixTemplate,
};

}  // namespace

std::span<const Var> AllVars() { return kAll; }

absl::string_view UseName(Use use) {
  switch (use) {
    case Use::kSetForWorkers: return "set for workers";
    case Use::kReadByLauncher: return "read by meshrun";
    case Use::kReadByWorkers: return "read by workers";
    case Use::kReadEverywhere: return "read by server, agents, workers";
  }
  return "?";
}

absl::string_view TypeName(Type type) {
  switch (type) {
    case Type::kString: return "string";
    case Type::kInt: return "int";
    case Type::kBool: return "bool";
    case Type::kDuration: return "seconds";
  }
  return "?";
}

std::optional<std::string> Get(const Var& var) {
  const char* v = std::getenv(std::string(var.name).c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

absl::StatusOr<std::optional<long long>> GetInt(const Var& var) {
  std::optional<std::string> raw = Get(var);
  if (!raw) return std::optional<long long>();
  long long value = 0;
  if (!absl::SimpleAtoi(*raw, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        var.name, "='", *raw, "' is not an integer"));
  }
  return std::optional<long long>(value);
}

}  // namespace meshrun::env
