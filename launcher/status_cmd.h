// `meshrun status`: a run as the rendezvous server sees it (its Status RPC):
// state, round, restarts used of the budget, world size, and a table of
// nodes; once, or redrawn in place with --watch; as text or JSON.
#pragma once

#include <string>

#include "client/status.h"

namespace meshrun::launcher {

// The text `meshrun status` prints for `status` (queried at `endpoint`):
// one header line per run, then its nodes (node rank, host, address,
// workers, state, last keep-alive age). Pure.
std::string FormatStatusTable(const client::ServerStatus& status, const std::string& endpoint);

// The same as one line of JSON: {"endpoint", "version", "runs": [{"run_id",
// "state", "round", "restarts", "max_restarts", "world_size", "min_nodes",
// "max_nodes", "lost_nodes", "kv_keys", "nodes": [{"node_rank", "hostname",
// "addr", "workers", "state", "keepalive_age_s"}]}]}. keepalive_age_s is
// null when never seen. Pure.
std::string FormatStatusJson(const client::ServerStatus& status, const std::string& endpoint);

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
