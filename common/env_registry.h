// The one registry of environment variables meshrun reads or sets.
//
// Every variable appears here once, with its type, who reads or sets it and a
// description; `meshrun --help-env` prints the table. Code refers to the
// constants below rather than spelling names again.
#pragma once

#include <optional>
#include <span>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace meshrun::env {

enum class Type { kString, kInt, kBool, kDuration };
// kSetForWorkers: the agent sets it in every worker's environment.
// kReadByLauncher: meshrun reads it (flag defaults, tuning).
// kReadByWorkers: libmesh / the store client reads it in a worker.
enum class Use { kSetForWorkers, kReadByLauncher, kReadByWorkers, kReadEverywhere };

struct Var {
  absl::string_view name;
  Type type;
  Use use;
  absl::string_view description;
};

// The torchrun-compatible worker variables (torchrun's meaning, docs/design.md §3).
inline constexpr Var kRank{"RANK", Type::kInt, Use::kSetForWorkers, "Global rank of the worker, 0..WORLD_SIZE-1; contiguous per node."};
inline constexpr Var kLocalRank{"LOCAL_RANK", Type::kInt, Use::kSetForWorkers, "Rank of the worker on its node, 0..LOCAL_WORLD_SIZE-1."};
inline constexpr Var kWorldSize{"WORLD_SIZE", Type::kInt, Use::kSetForWorkers, "Total number of workers in the job."};
inline constexpr Var kLocalWorldSize{"LOCAL_WORLD_SIZE", Type::kInt, Use::kSetForWorkers, "Workers on this node (--nproc_per_node)."};
inline constexpr Var kGroupRank{"GROUP_RANK", Type::kInt, Use::kSetForWorkers, "Node rank of this node in the current round."};
inline constexpr Var kGroupWorldSize{"GROUP_WORLD_SIZE", Type::kInt, Use::kSetForWorkers, "Number of nodes in the current round."};
inline constexpr Var kRoleRank{"ROLE_RANK", Type::kInt, Use::kSetForWorkers, "Rank among workers with the same role."};
inline constexpr Var kRoleName{"ROLE_NAME", Type::kString, Use::kSetForWorkers, "The --role name (default 'default')."};
inline constexpr Var kRoleWorldSize{"ROLE_WORLD_SIZE", Type::kInt, Use::kSetForWorkers, "Workers with this role."};
inline constexpr Var kMasterAddr{"MASTER_ADDR", Type::kString, Use::kSetForWorkers, "Numeric address of node rank 0, for init_process_group(env://)."};
inline constexpr Var kMasterPort{"MASTER_PORT", Type::kInt, Use::kSetForWorkers, "Node rank 0's agent store: PyTorch's TCPStore protocol, served by meshrun over its store."};
inline constexpr Var kRunId{"TORCHELASTIC_RUN_ID", Type::kString, Use::kSetForWorkers, "The run id (--rdzv_id)."};
inline constexpr Var kRestartCount{"TORCHELASTIC_RESTART_COUNT", Type::kInt, Use::kSetForWorkers, "Failure restarts consumed so far, job-wide (same on every node)."};
inline constexpr Var kSignalsToHandle{"TORCHELASTIC_SIGNALS_TO_HANDLE", Type::kString, Use::kSetForWorkers, "The signals meshrun handles (--signals_to_handle), by name, comma-separated, as torchrun 2.x's workers inherit it."};
inline constexpr Var kMaxRestarts{"TORCHELASTIC_MAX_RESTARTS", Type::kInt, Use::kSetForWorkers, "The job-wide restart budget (--max_restarts)."};
inline constexpr Var kUseAgentStore{"TORCHELASTIC_USE_AGENT_STORE", Type::kBool, Use::kSetForWorkers, "'True' (the default): env:// connects to the agent store at MASTER_ADDR:MASTER_PORT as a client; 'False' with rdzv_conf agent_store=0 (worker rank 0 then hosts the TCPStore)."};
inline constexpr Var kTorchftLighthouse{"TORCHFT_LIGHTHOUSE", Type::kString, Use::kSetForWorkers, "The node agent's lighthouse endpoint for torchft's Manager, http://127.0.0.1:PORT (the run's lighthouse in the rendezvous server); not set with rdzv_conf lighthouse=0."};
inline constexpr Var kLighthouseRunId{"MESHRUN_LIGHTHOUSE_RUN_ID", Type::kString, Use::kSetForWorkers, "The run of the lighthouse at TORCHFT_LIGHTHOUSE (the job's run id with --replica_groups): its store is shared by the job's replica groups, and the node's store proxy serves it too (libmesh's fault-tolerance manager). Not set with rdzv_conf lighthouse=0."};
inline constexpr Var kReplicaGroupId{"REPLICA_GROUP_ID", Type::kInt, Use::kSetForWorkers, "With --replica_groups=R: this node's replica group, 0..R-1 (what torchft's examples read; one torchrun per group sets it by hand). Not set without --replica_groups."};
inline constexpr Var kNumReplicaGroups{"NUM_REPLICA_GROUPS", Type::kInt, Use::kSetForWorkers, "With --replica_groups=R: R. Not set without --replica_groups."};
inline constexpr Var kErrorFile{"TORCHELASTIC_ERROR_FILE", Type::kString, Use::kSetForWorkers, "Where a worker writes its error JSON (torchrun's @record format)."};
inline constexpr Var kOmpNumThreads{"OMP_NUM_THREADS", Type::kInt, Use::kSetForWorkers, "Set to 1 when unset and nproc_per_node > 1, as torchrun does."};
inline constexpr Var kTorchNcclAsyncErrorHandling{"TORCH_NCCL_ASYNC_ERROR_HANDLING", Type::kInt, Use::kSetForWorkers, "1 unless the user set it or NCCL_ASYNC_ERROR_HANDLING (then that value)."};
inline constexpr Var kNcclAsyncErrorHandling{"NCCL_ASYNC_ERROR_HANDLING", Type::kInt, Use::kSetForWorkers, "Older PyTorch's name of the above; same value."};

// meshrun's own worker variables.
inline constexpr Var kStoreEndpoint{"MESHRUN_STORE_ENDPOINT", Type::kString, Use::kSetForWorkers, "The store for this worker: unix:/<dir>/store.sock, its node agent's store proxy (a private 0700 directory); host:port of the rendezvous server for a worker started by hand."};
inline constexpr Var kMeshrunRunId{"MESHRUN_RUN_ID", Type::kString, Use::kSetForWorkers, "The run id (same as TORCHELASTIC_RUN_ID)."};
inline constexpr Var kRound{"MESHRUN_ROUND", Type::kInt, Use::kSetForWorkers, "The rendezvous round (every re-form counts); scopes store keys."};
inline constexpr Var kNodeAddr{"MESHRUN_NODE_ADDR", Type::kString, Use::kSetForWorkers, "This node's advertised address (numeric), decided in the rendezvous: what the other nodes reach it on; libmesh's Gloo pairs bind it."};
inline constexpr Var kGlooSocketIfname{"GLOO_SOCKET_IFNAME", Type::kString, Use::kSetForWorkers, "When unset: the interface holding MESHRUN_NODE_ADDR, so PyTorch's Gloo does not bind what the host name resolves to (127.0.1.1 on Debian). A value the user set is kept."};
inline constexpr Var kNodeRank{"MESHRUN_NODE_RANK", Type::kInt, Use::kSetForWorkers, "Node rank (same as GROUP_RANK)."};
inline constexpr Var kPermanentFailureExitCode{"MESHRUN_PERMANENT_FAILURE_EXIT_CODE", Type::kInt, Use::kSetForWorkers, "Exit with this code to mark a failure permanent: the job stops on every node without a restart (--permanent_failure_exit_code; unset when 0)."};
inline constexpr Var kToken{"MESHRUN_TOKEN", Type::kString, Use::kReadEverywhere, "Shared secret: the server requires it on every request; meshrun sends it (also for its workers' store requests). Not passed to workers; read by a worker started by hand with a host:port store endpoint."};
inline constexpr Var kTokenFile{"MESHRUN_TOKEN_FILE", Type::kString, Use::kReadEverywhere, "A file holding the token (mode 0600 or stricter; one trailing newline stripped); instead of MESHRUN_TOKEN. Not passed to workers."};
inline constexpr Var kTlsCert{"MESHRUN_TLS_CERT", Type::kString, Use::kReadEverywhere, "PEM file: this process's TLS certificate (server: served; client: presented for mutual TLS). Not passed to workers."};
inline constexpr Var kTlsKey{"MESHRUN_TLS_KEY", Type::kString, Use::kReadEverywhere, "PEM file: the private key of MESHRUN_TLS_CERT. Not passed to workers."};
inline constexpr Var kTlsCa{"MESHRUN_TLS_CA", Type::kString, Use::kReadEverywhere, "PEM file: the CA peers are verified against (client: TLS on, server checked; server: client certificates required). Not passed to workers."};

// What meshrun itself reads.
inline constexpr Var kPythonExec{"PYTHON_EXEC", Type::kString, Use::kReadByLauncher, "Interpreter for .py programs and -m modules (default: the python3 of the venv meshrun is installed in, else python3)."};
inline constexpr Var kLogLevel{"MESHRUN_LOG_LEVEL", Type::kString, Use::kReadEverywhere, "meshrun's log level: trace, debug, info, warn (default), error, off."};
inline constexpr Var kShutdownTimeoutEnv{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", Type::kDuration, Use::kReadByLauncher, "Default of --shutdown_timeout, in seconds (torchrun's)."};
inline constexpr Var kCudaVisibleDevices{"CUDA_VISIBLE_DEVICES", Type::kString, Use::kReadByLauncher, "Honoured when counting GPUs for --nproc_per_node=gpu|auto and --numa-binding; passed to workers (with --virtual-local-rank: each worker's one device)."};
inline constexpr Var kLogLinePrefixTemplate{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", Type::kString, Use::kReadByLauncher, "Default of --log-line-prefix-template (torchrun's): ${role_name}, ${rank}, ${local_rank}."};

// Returns every variable above, in the order of this file.
std::span<const Var> AllVars();

// Human-readable names of a Use and a Type, for `meshrun --help-env`.
absl::string_view UseName(Use use);
absl::string_view TypeName(Type type);

// Reads `var` from the process environment; nullopt when unset or empty.
std::optional<std::string> Get(const Var& var);
// Reads an integer variable; nullopt when unset; INVALID_ARGUMENT naming the
// variable and value when it is not an integer.
absl::StatusOr<std::optional<long long>> GetInt(const Var& var);

}  // namespace meshrun::env
