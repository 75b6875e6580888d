// The environment of one worker (docs/design.md §3): torchrun's variables with
// torchrun's meaning, plus meshrun's MESHRUN_* extras.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "proto/types.h"

namespace meshrun::agent {

struct WorkerEnvInput {
  rendezvous::Assignment assignment;
  int local_rank = 0;
  int nproc = 1;                // LOCAL_WORLD_SIZE.
  std::string role = "default";
  std::string run_id;
  // MESHRUN_STORE_ENDPOINT: the node's store proxy, "unix:/dir/store.sock"
  // (agent/store_proxy/store_proxy.h).
  std::string store_endpoint;
  std::string error_file;       // TORCHELASTIC_ERROR_FILE.
  // The interface holding assignment.node_addr: GLOO_SOCKET_IFNAME when the
  // base environment lacks it (empty: not set).
  std::string gloo_socket_ifname;
  int permanent_failure_exit_code = 0;  // MESHRUN_PERMANENT_FAILURE_EXIT_CODE; not set when 0.
  // torchrun's --virtual-local-rank: LOCAL_RANK=0, and CUDA_VISIBLE_DEVICES
  // the worker's one device: entry `local_rank` of `base`'s list when set
  // (the launcher checks it is long enough), else `local_rank` itself.
  bool virtual_local_rank = false;
  // TORCHELASTIC_SIGNALS_TO_HANDLE: the signals meshrun handles, by name,
  // comma-separated (as torchrun 2.x writes --signals_to_handle into its
  // environment, which its workers inherit). Not set when empty.
  std::string signals_to_handle;
  // TORCHELASTIC_USE_AGENT_STORE: True when the agent store serves
  // MASTER_PORT (rdzv_conf agent_store=1, the default), else False (worker
  // rank 0 then hosts PyTorch's TCPStore there).
  bool agent_store = true;
  // TORCHFT_LIGHTHOUSE: the node's lighthouse endpoint for torchft
  // (agent/lighthouse/lighthouse_proxy.h), "http://127.0.0.1:PORT"; not set
  // when empty (rdzv_conf lighthouse=0), so a user's own stays.
  std::string torchft_lighthouse;
  // MESHRUN_LIGHTHOUSE_RUN_ID: the run of that lighthouse, whose store the
  // node's proxy also serves (libmesh's fault-tolerance manager); not set
  // when empty.
  std::string lighthouse_run_id;
  // REPLICA_GROUP_ID and NUM_REPLICA_GROUPS (meshrun --replica_groups):
  // not set when num_replica_groups is 0.
  int replica_group = 0;
  int num_replica_groups = 0;
};

// Returns `base` (the agent's own environment, "K=V" strings) with the
// worker's variables set or overridden, as "K=V" strings sorted by name.
// OMP_NUM_THREADS=1, TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and
// NCCL_ASYNC_ERROR_HANDLING=1 are added only when `base` lacks them
// (OMP only when nproc > 1), as torchrun does; GLOO_SOCKET_IFNAME only when
// `base` lacks it (torchrun sets none: PyTorch's Gloo then binds what the
// host name resolves to, 127.0.1.1 on Debian). MESHRUN_NODE_ADDR is the
// assignment's node_addr. The token and TLS stay with the agent (docs/design.md
// section 3): MESHRUN_TOKEN, MESHRUN_TOKEN_FILE and MESHRUN_TLS_CERT/KEY/CA
// are removed from `base`, since workers reach the store through the
// agent's proxy. Pure function.
std::vector<std::string> BuildWorkerEnv(const std::vector<std::string>& base, const WorkerEnvInput& in);

// The calling process's environment as "K=V" strings.
std::vector<std::string> CurrentEnvironment();

// Replaces every "${local_rank}" in `args` with `local_rank` (torchrun's
// macro substitution).
std::vector<std::string> SubstituteLocalRank(const std::vector<std::string>& args, int local_rank);

}  // namespace meshrun::agent
