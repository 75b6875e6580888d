// The `meshrun` command line: torchrun's flags (both --a_b and --a-b
// spellings, PET_<NAME> environment defaults) parsed into a LaunchConfig
// (flags.cc; --rdzv_conf: rdzv_conf.h; the worker command: worker_command.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/node_agent.h"
#include "rendezvous/policy/limits.h"

namespace meshrun::launcher {

enum class Backend { kMeshrun, kStatic };

struct LaunchConfig {
  agent::AgentOptions agent;
  Backend backend = Backend::kMeshrun;
  bool standalone = false;
  // rdzv_conf is_host: nullopt = infer from the endpoint's host.
  std::optional<bool> is_host;
  // rdzv_conf metrics_port (meshrun's key): the embedded server, when this
  // meshrun hosts it, serves Prometheus metrics on this port; -1: none.
  int metrics_port = -1;
  // rdzv_conf health_port (meshrun's key): this meshrun answers gRPC health
  // checks on this plaintext port (launcher/health_port.h); -1: none.
  int health_port = -1;
  // Host and port of --rdzv_endpoint (or master_addr:master_port for static).
  std::string endpoint_host;
  // --rdzv_endpoint listing several replicas ("h1:p,h2:p,..."; the first is
  // endpoint_host:endpoint_port): the agent follows their leader. Empty for
  // one endpoint.
  std::string endpoint_list;
  int endpoint_port = 29400;
  // The static backend's --master_port (0 otherwise): as under torchrun, the
  // workers' MASTER_PORT, where node rank 0's agent store listens; the
  // rendezvous server it hosts takes a free port, which the other nodes
  // read from that agent store (agent/tcpstore/client.h).
  int static_master_port = 0;
  // rdzv_conf server_port: that hosted server's port (0: a free one), for
  // networks that open only known ports between nodes.
  int static_server_port = 0;
  std::vector<std::string> notes;  // One-time notes (ignored flags).
  // Limits of the embedded server, when this node hosts it (rdzv_conf keys
  // named as in rendezvous/policy/limits.h).
  rendezvous::ServerLimits server_limits;
  // rdzv_conf tls_cert / tls_key / tls_ca and token_file, before they are
  // read (ParseCommandLine then fills agent.auth).
  TlsFiles tls_files;
  std::string token_file;
};

// Result of parsing: either a config to run, or an exit code to return now
// (0 after --help/--version/--help-env, 2 after a bad flag, 127 when the
// program does not exist), with what to print already printed.
struct ParseOutcome {
  std::optional<LaunchConfig> config;
  int exit_code = 0;
};

// Parses argv of `meshrun [flags] prog [args...]`. Bad values give one line
// on stderr naming the flag, the value and what is allowed.
ParseOutcome ParseCommandLine(int argc, char** argv);

// Parses "N" or "MIN:MAX" with 0 < MIN <= MAX (torchrun's
// parse_min_max_nnodes). INVALID_ARGUMENT naming the value.
absl::StatusOr<std::pair<int, int>> ParseNnodes(const std::string& text);

// Resolves --nproc_per_node: a positive integer, "cpu" (usable CPUs),
// "gpu" (NVIDIA GPUs visible under CUDA_VISIBLE_DEVICES; error when none),
// or "auto" (GPUs when any, else CPUs). GPUs are counted from
// /proc/driver/nvidia/gpus, without loading the CUDA runtime.
absl::StatusOr<int> ResolveNprocPerNode(const std::string& text);

// Counts the GPUs visible to workers: the driver's count filtered by
// CUDA_VISIBLE_DEVICES (entries are used up to the first invalid one).
int CountVisibleGpus();

}  // namespace meshrun::launcher
