#include "rendezvous/requests.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace meshrun::rendezvous::requests {
namespace {

namespace pb = ::meshrun::v1;

// Constant-time comparison, so the token cannot be guessed byte by byte.
bool TokenEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

absl::Duration FromMs(int64_t ms) { return absl::Milliseconds(ms); }

}  // namespace

absl::Status Admit(const std::string& server_token, const pb::RunRef& run, bool need_run_id) {
  if (!server_token.empty() && !TokenEquals(run.token(), server_token)) {
    return absl::UnauthenticatedError(run.token().empty() ? "this server requires a token (MESHRUN_TOKEN)"
                                                          : "wrong token (MESHRUN_TOKEN)");
  }
  if (need_run_id && run.run_id().empty()) return absl::InvalidArgumentError("empty run id");
  return absl::OkStatus();
}

absl::StatusOr<JoinArgs> JoinFromProto(const pb::JoinRequest& req, const std::string& peer_ip) {
  const pb::NodeInfo& n = req.node();
  const pb::RunConfig& c = req.config();
  if (n.node_id().empty() || n.nproc() <= 0 || c.min_nodes() <= 0 || c.max_nodes() < c.min_nodes()) {
    return absl::InvalidArgumentError("join needs a node id, nproc > 0 and 0 < min_nodes <= max_nodes");
  }
  // Found by fuzzing: two nodes of nproc 2^31-1 overflowed the world size (int).
  if (n.nproc() > kMaxNprocPerNode) {
    return absl::InvalidArgumentError(
        absl::StrCat("join: nproc ", n.nproc(), " is more than the limit of ", kMaxNprocPerNode, " per node"));
  }
  if (c.max_nodes() > kMaxNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("join: max_nodes ", c.max_nodes(), " is more than the limit of ", kMaxNodes, " nodes"));
  }
  JoinArgs out;
  out.node = NodeDesc{n.node_id(), n.hostname(), n.addr(), n.pid(), n.nproc(), n.node_rank_hint(),
                      n.is_endpoint_host(), n.master_port(), n.role().empty() ? "default" : n.role(),
                      n.local_addr(), n.dialed_addr()};
  // Without an explicit --local_addr, a node's address is the source of the
  // connection this server sees (DESIGN.md section 4b), not its own guess.
  if (out.node.local_addr.empty() && !peer_ip.empty()) out.node.addr = peer_ip;
  out.config = RunConfig{c.min_nodes(), c.max_nodes(), FromMs(c.last_call_timeout_ms()), c.max_restarts(),
                         FromMs(c.exit_barrier_timeout_ms())};
  if (c.keep_alive_interval_ms() > 0) out.config.keep_alive_interval = FromMs(c.keep_alive_interval_ms());
  if (c.keep_alive_max_attempt() > 0) out.config.keep_alive_max_attempt = c.keep_alive_max_attempt();
  return out;
}

}  // namespace meshrun::rendezvous::requests
