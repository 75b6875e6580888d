// `meshrun status`: a run as the rendezvous server sees it (its Status RPC):
// state, round, restarts used of the budget, world size, and a table of
// nodes; once, or redrawn in place with --watch; as text or JSON.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "client/status.h"

namespace meshrun::launcher {

// One endpoint given to `meshrun status` and its answer (or why none came).
struct ReplicaProbe {
  std::string endpoint;
  absl::StatusOr<client::ServerStatus> answer;
};

// One line of the replicas' table: the replica ("host:port", or "host:port
// (as <endpoint>)" when asked by another name) and its state: "leading for
// 12.3s", "standing by", "unreachable: <why>", or, for a replica in etcd's
// election that was not asked, "leading|standing by (in etcd's election;
// not asked)".
struct ReplicaRow {
  std::string replica;
  std::string state;
};

// The rows for every endpoint asked (in their order), then the replicas of
// `status`'s election list that none of them is. `now`: for the leader's
// age. Pure.
std::vector<ReplicaRow> ReplicaRows(const client::ServerStatus& status, const std::vector<ReplicaProbe>& asked,
                                    absl::Time now);

// The text `meshrun status` prints for `status` (queried at `endpoint`):
// for replicas (or several endpoints asked), the election's list and a
// table of every replica's state (ReplicaRows); then one header line per
// run, a summary of its nodes' states ("nodes: 63 running, 1 failed") and
// its nodes (node rank, host, address, workers, state, last keep-alive
// age). Pure.
std::string FormatStatusTable(const client::ServerStatus& status, const std::string& endpoint,
                              const std::vector<ReplicaProbe>& asked = {}, absl::Time now = absl::Now());

// The same as one line of JSON: {"endpoint", "version", "runs": [{"run_id",
// "state", "round", "restarts", "max_restarts", "world_size", "min_nodes",
// "max_nodes", "lost_nodes", "kv_keys", "nodes": [{"node_rank", "hostname",
// "addr", "workers", "state", "keepalive_age_s"}]}]}. keepalive_age_s is
// null when never seen. For replicas (or several endpoints asked) also
// "replica_role", "replicas" (the election's: id, address, leader) and
// "asked": [{"endpoint", "state" (leading, standing by, serving,
// unreachable), "address", "leading_for_s" | "reason"}]. Pure.
std::string FormatStatusJson(const client::ServerStatus& status, const std::string& endpoint,
                             const std::vector<ReplicaProbe>& asked = {}, absl::Time now = absl::Now());

// `meshrun status --rdzv_endpoint host:port [--rdzv_id ID] [--json]
// [--watch [--interval S] [--watch_limit S]] [--timeout S] [--token_file F]
// [--tls_ca F [--tls_cert F --tls_key F]]`. The token from --token_file,
// else MESHRUN_TOKEN_FILE, else MESHRUN_TOKEN; TLS from the flags, else
// MESHRUN_TLS_CA/CERT/KEY (as the agent: common/security.h,
// LoadClientAuth). Exit 0 after printing; 1 when the server cannot be
// reached (a closed port at once: "connection refused"; a TLS mismatch
// named) or has no such run (one line naming endpoint and run); 2 on a bad
// flag or an unreadable token or TLS file. --watch redraws every --interval
// seconds (0.1..3600) until SIGINT/SIGTERM or --watch_limit seconds
// (default 3600) pass; in place on a terminal, one frame after another
// (no terminal control codes) when stdout is not one. Call from main() with
// no signals blocked.
int StatusMain(int argc, char** argv);

}  // namespace meshrun::launcher
