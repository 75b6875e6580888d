#include "agent/worker_env.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/env_registry.h"

extern char** environ;

namespace meshrun::agent {

std::vector<std::string> BuildWorkerEnv(const std::vector<std::string>& base, const WorkerEnvInput& in) {
  std::map<std::string, std::string> env;
  for (const auto& kv : base) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  auto set = [&](const env::Var& var, const std::string& value) { env[std::string(var.name)] = value; };
  auto set_default = [&](const env::Var& var, const std::string& value) {
    env.emplace(std::string(var.name), value);
  };
  const rendezvous::Assignment& a = in.assignment;
  set(env::kLocalRank, absl::StrCat(in.local_rank));
  set(env::kRank, absl::StrCat(a.rank_base + in.local_rank));
  set(env::kGroupRank, absl::StrCat(a.node_rank));
  set(env::kRoleRank, absl::StrCat(a.role_rank_base + in.local_rank));
  set(env::kRoleName, in.role);
  set(env::kLocalWorldSize, absl::StrCat(in.nproc));
  set(env::kWorldSize, absl::StrCat(a.world_size));
  set(env::kGroupWorldSize, absl::StrCat(a.node_count));
  set(env::kRoleWorldSize, absl::StrCat(a.role_world_size));
  set(env::kMasterAddr, a.master_addr);
  set(env::kMasterPort, absl::StrCat(a.master_port));
  set(env::kRestartCount, absl::StrCat(a.restart_count));
  set(env::kMaxRestarts, absl::StrCat(a.max_restarts));
  if (!in.signals_to_handle.empty()) set(env::kSignalsToHandle, in.signals_to_handle);
  set(env::kRunId, in.run_id);
  set(env::kUseAgentStore, in.agent_store ? "True" : "False");
  if (!in.torchft_lighthouse.empty()) set(env::kTorchftLighthouse, in.torchft_lighthouse);
  if (!in.lighthouse_run_id.empty()) set(env::kLighthouseRunId, in.lighthouse_run_id);
  if (in.num_replica_groups > 0) {
    set(env::kReplicaGroupId, absl::StrCat(in.replica_group));
    set(env::kNumReplicaGroups, absl::StrCat(in.num_replica_groups));
  }
  set(env::kErrorFile, in.error_file);
  // Either name set by the user wins for both (newer PyTorch reads the
  // TORCH_ name first, so a lone NCCL_ASYNC_ERROR_HANDLING=0 must carry over).
  auto torch_name = std::string(env::kTorchNcclAsyncErrorHandling.name);
  auto old_name = std::string(env::kNcclAsyncErrorHandling.name);
  std::string async = env.count(torch_name) ? env[torch_name] : env.count(old_name) ? env[old_name] : "1";
  set_default(env::kTorchNcclAsyncErrorHandling, async);
  set_default(env::kNcclAsyncErrorHandling, async);
  if (in.nproc > 1) set_default(env::kOmpNumThreads, "1");
  set(env::kStoreEndpoint, in.store_endpoint);
  set(env::kMeshrunRunId, in.run_id);
  set(env::kRound, absl::StrCat(a.round));
  set(env::kNodeRank, absl::StrCat(a.node_rank));
  if (!a.node_addr.empty()) set(env::kNodeAddr, a.node_addr);
  if (!in.gloo_socket_ifname.empty()) set_default(env::kGlooSocketIfname, in.gloo_socket_ifname);
  // The token and TLS material stay with the agent.
  for (const env::Var* secret : {&env::kToken, &env::kTokenFile, &env::kTlsCert, &env::kTlsKey, &env::kTlsCa}) {
    env.erase(std::string(secret->name));
  }
  if (in.virtual_local_rank) {
    set(env::kLocalRank, "0");
    std::string device = absl::StrCat(in.local_rank);
    auto visible = env.find(std::string(env::kCudaVisibleDevices.name));
    if (visible != env.end() && !visible->second.empty()) {
      std::vector<std::string> list = absl::StrSplit(visible->second, ',');
      if (in.local_rank < static_cast<int>(list.size())) device = list[in.local_rank];
    }
    set(env::kCudaVisibleDevices, device);
  }
  if (in.permanent_failure_exit_code != 0) {
    set(env::kPermanentFailureExitCode, absl::StrCat(in.permanent_failure_exit_code));
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(absl::StrCat(k, "=", v));
  return out;
}

std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

std::vector<std::string> SubstituteLocalRank(const std::vector<std::string>& args, int local_rank) {
  std::vector<std::string> out;
  out.reserve(args.size());
  const std::string value = absl::StrCat(local_rank);
  for (const auto& a : args) out.push_back(absl::StrReplaceAll(a, {{"${local_rank}", value}}));
  return out;
}

}  // namespace meshrun::agent
