// The per-node agent: joins the run, spawns and supervises this node's
// workers, restarts them through the server, forwards signals, and decides
// meshrun's exit code. Mirrors torchrun's LocalElasticAgent.
#pragma once

#include <csignal>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/process.h"
#include "agent/signal_policy.h"
#include "agent/store_proxy/store_cache.h"
#include "common/security.h"

namespace meshrun::agent {
namespace tcpstore {
class AgentStore;
}  // namespace tcpstore

struct AgentOptions {
  std::string run_id;               // --rdzv_id.
  std::string endpoint;             // Rendezvous server "host:port".
  // Why this meshrun did not host the endpoint's server although it runs
  // on its host (empty otherwise); appended to an "unreachable" error.
  std::string endpoint_note;
  // Called on the agent's thread when a signal makes this agent stop, before
  // it stops its workers (the launcher hosting the server shuts it down
  // first, so the other nodes learn why rather than seeing a lost node).
  std::function<void(int signo)> on_stop_signal;
  // The token (MESHRUN_TOKEN, or read from a token file; empty: none) and
  // TLS (MESHRUN_TLS_*, rdzv_conf tls_*) of this node's one connection to
  // the server, already loaded and checked (LoadClientAuth). The token goes
  // with the agent's requests and the workers' store requests it forwards;
  // neither is given to the workers.
  ClientAuth auth;
  // The store proxy (agent/store_proxy/store_proxy.h) serving this node's workers:
  // rdzv_conf store_proxy_cache_bytes, store_proxy_max_waiters, and
  // store_proxy_max_message_bytes, store_proxy_batch_hold
  // (docs/user-guide.md).
  StoreCacheOptions store_cache;
  int64_t store_proxy_max_message_bytes = 4 << 20;
  absl::Duration store_proxy_batch_hold = absl::Milliseconds(100);
  // torchrun's agent store (agent/tcpstore/tcpstore_server.h): connections
  // served at once (rdzv_conf agent_store_max_connections).
  int agent_store_max_connections = 4096;
  // rdzv_conf agent_store_max_buffered_bytes (tcpstore_server.h).
  int64_t agent_store_max_buffered_bytes = int64_t{512} << 20;
  int agent_store_max_waits = 1024;  // rdzv_conf agent_store_max_waits (tcpstore_server.h).
  int64_t agent_store_max_listed_keys = 32768;  // rdzv_conf agent_store_max_listed_keys (tcpstore_server.h).
  // rdzv_conf agent_store_read_cache_bytes (tcpstore_server.h): 0 turns the read cache off.
  int64_t agent_store_read_cache_bytes = int64_t{64} << 20;
  // rdzv_conf agent_store: false gives MASTER_PORT back to worker rank 0 (a
  // free port, TORCHELASTIC_USE_AGENT_STORE=False), torchrun 1.x's way.
  bool agent_store_enabled = true;
  // torchft's lighthouse for the workers (agent/lighthouse/lighthouse_proxy.h):
  // rdzv_conf lighthouse (on by default), lighthouse_min_replicas,
  // lighthouse_join_timeout, lighthouse_quorum_tick, lighthouse_heartbeat_timeout
  // (zero: the server's defaults, torchft's), lighthouse_max_calls (the
  // workers' calls the endpoint holds at once).
  // lighthouse_run names the run whose lighthouse the workers use (several
  // jobs, one per replica group, sharing one; empty: this job's run).
  struct Lighthouse {
    bool enabled = true;
    std::string run_id;
    int64_t min_replicas = 0;
    absl::Duration join_timeout = absl::ZeroDuration();
    absl::Duration quorum_tick = absl::ZeroDuration();
    absl::Duration heartbeat_timeout = absl::ZeroDuration();
    int64_t max_calls = 1024;
  } lighthouse;
  // Already listening (the static backend's node rank 0 serves it on
  // --master_port, started by the launcher): used instead of a fresh one.
  std::shared_ptr<tcpstore::AgentStore> agent_store;
  int nproc = 1;                    // --nproc_per_node (resolved to a number).
  int min_nodes = 1;                // --nnodes MIN.
  int max_nodes = 1;                // --nnodes MAX.
  int node_rank = -1;               // --node_rank, -1 when not given.
  // --replica_groups=R (0: none): the job is R replica groups, each a run of
  // its own ("<run id>-group-<g>", rendezvous/run/replica_group_placer.h)
  // of min_nodes..max_nodes nodes (per group: the launcher divides --nnodes
  // by R), sharing the lighthouse of `run_id`. The agent asks the server
  // for its group before its first join, and again every
  // keep_alive_interval while every group is full (a standby), within
  // join_timeout.
  int replica_groups = 0;
  // --min_replica_groups=M (with replica_groups; 1..R): the job fails once
  // fewer than M groups are alive (every agent of the groups still running
  // reports it, a permanent failure of its group: the group's run fails),
  // and succeeds when at least M groups finished. Every agent waits, after
  // its group ended, until no group is in progress (one exit barrier
  // across the groups: agent/replica_group_job.h), and exits with the
  // job's result.
  int min_replica_groups = 1;
  std::string role = "default";     // --role.
  int max_restarts = 0;             // --max_restarts (job-wide).
  bool is_endpoint_host = false;    // This agent runs on the endpoint's host.
  std::string local_addr;           // --local_addr; empty: the address used to reach the server.
  // The worker command, interpreter included ("python3 -u train.py ..."),
  // argv[0] resolved to a path. "${local_rank}" is substituted per worker.
  std::vector<std::string> command;
  // Signals meshrun handles (--signals_to_handle; DefaultHandledSignals()):
  // each goes to every worker's main process (signal_policy.h says which
  // ones stop the job). Signals ignored when meshrun started are left out.
  std::vector<int> forwarded_signals = DefaultHandledSignals();
  // --keep_orphans: at the end of the job, leave running what the workers
  // left behind (else SIGTERM, shutdown_timeout, SIGKILL; one line says how many).
  bool keep_orphans = false;
  // --permanent_failure_exit_code: a worker exiting with this code (1..255;
  // 0: none) marks its failure permanent, as does "permanent": true in its
  // error file: every node stops at once, no restart is used.
  int permanent_failure_exit_code = 78;
  absl::Duration shutdown_timeout = absl::Seconds(30);   // --shutdown_timeout.
  absl::Duration join_timeout = absl::Seconds(600);      // rdzv_conf join_timeout.
  absl::Duration last_call_timeout = absl::Seconds(30);  // rdzv_conf last_call_timeout.
  // rdzv_conf exit_barrier_timeout (meshrun's key; torchrun hard-wires 300 s):
  // how long a finished node waits for the others, and how long the meshrun
  // hosting the server keeps serving after its own workers are done.
  absl::Duration exit_barrier_timeout = absl::Seconds(300);
  // rdzv_conf exit_barrier_restart_grace (meshrun's key; >= 0): how long a
  // node whose exit barrier was refused waits for the event of a restart
  // decided as its workers finished (another node's failure), to restart
  // with the others, before it leaves with a warning (session_finish.cc).
  absl::Duration exit_barrier_restart_grace = absl::Seconds(2);
  absl::Duration read_timeout = absl::Seconds(60);       // rdzv_conf read_timeout (connect, reports).
  // rdzv_conf keep_alive_interval / keep_alive_max_attempt (torchrun's): the
  // agent heartbeats every interval; the server declares a node silent for
  // interval x attempts lost (a dead process is noticed at once anyway).
  absl::Duration keep_alive_interval = absl::Seconds(5);
  int keep_alive_max_attempt = 3;
  // rdzv_conf server_silence_timeout (meshrun's key): the server counts as
  // lost after this long without an answer (client/rdzv_client.h,
  // ServerSilenceLimit: at most the run's keep-alive rule, at least one
  // heartbeat interval + 2 s).
  absl::Duration server_silence_timeout = absl::Seconds(8);
  // rdzv_conf leader_grace (meshrun's key): with several replicas
  // (--rdzv_endpoint=h1:p,h2:p,...), how long the agent looks for a leader
  // after losing the one it used (a failover, etcd without quorum) while its
  // workers keep running, before it stops them (client/rdzv_client.h).
  absl::Duration leader_grace = absl::Seconds(60);
  // rdzv_conf leader_resend_interval (meshrun's key): a worker's store
  // request or torchft Quorum call kept for the next leader is sent again
  // on the current connection when no next leader is named this long
  // (agent/kept_calls.h).
  absl::Duration leader_resend_interval = absl::Seconds(1);
  // Where per-attempt folders go: <log_dir>/<run id>_<start time>_<pid>/
  // attempt_<round>/rank_<r>.{stdout,stderr,error.json}, every stream of
  // every worker kept. Empty: a temporary folder holding the error files
  // (and redirected streams), removed when meshrun exits 0.
  std::string log_dir;
  // torchrun's --redirects / --tee ("0".."3" or "0:1,1:2") and
  // --local_ranks_filter ("0,1": only these local ranks reach the console).
  std::string redirects;
  std::string tee;
  std::string local_ranks_filter;
  // torchrun's --log-line-prefix-template (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE):
  // the console prefix of every worker line, ${role_name}/${rank}/${local_rank}
  // substituted (output.h). Empty: meshrun's "[n<node rank>:r<rank>] ".
  std::string log_line_prefix_template;
  // torchrun's --duplicate-std{out,err}-filters: lines containing one of these
  // also go to <attempt folder>/filtered_std{out,err}.log.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  // torchrun's --virtual-local-rank: LOCAL_RANK=0 for every worker, and
  // CUDA_VISIBLE_DEVICES its one device (worker_env.h).
  bool virtual_local_rank = false;
  // --numa_binding, resolved by the launcher: local rank i's CPUs and NUMA
  // nodes (entry i); empty: no binding.
  std::vector<CpuBinding> numa_bindings;
};

class NodeAgent {
 public:
  explicit NodeAgent(AgentOptions options);

  // Runs the job to its end and returns meshrun's exit code: 0 when every
  // worker of every node exited 0; the root-cause worker's exit code (128+n
  // for signal n); 128+n when meshrun itself got signal n; 1 for rendezvous
  // errors (unreachable server, join timeout, lost server, conflicts).
  // Call from the main thread after BlockSignals(options.forwarded_signals);
  // not thread-safe; call once.
  int Run();

  // The signal that made meshrun itself stop (0 when none): a hosting
  // meshrun that was told to stop does not keep serving for the others.
  int received_signal() const { return received_signal_; }

 private:
  AgentOptions options_;
  int received_signal_ = 0;
};

}  // namespace meshrun::agent
