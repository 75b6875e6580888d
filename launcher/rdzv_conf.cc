#include "launcher/rdzv_conf.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "launcher/cli.h"
#include "rendezvous/policy/limits.h"

namespace meshrun::launcher {
namespace {

constexpr const char* kRdzvConfKeys[] = {
    "join_timeout", "last_call_timeout", "close_timeout", "read_timeout", "keep_alive_interval",
    "keep_alive_max_attempt", "heartbeat_timeout", "is_host", "timeout", "exit_barrier_timeout", "exit_barrier_restart_grace", "metrics_port",
    "token_file", "tls_cert", "tls_key", "tls_ca", "store_proxy_cache_bytes", "store_proxy_max_waiters",
    "store_proxy_max_message_bytes", "store_proxy_batch_hold", "agent_store_max_connections", "agent_store_max_buffered_bytes", "agent_store_max_waits", "agent_store_max_listed_keys", "agent_store_read_cache_bytes", "agent_store", "lighthouse", "lighthouse_run", "lighthouse_min_replicas", "lighthouse_join_timeout", "lighthouse_quorum_tick", "lighthouse_heartbeat_timeout", "lighthouse_max_calls", "server_port", "use_libuv", "store_type", "health_port", "server_silence_timeout", "leader_grace", "leader_resend_interval"};

// An integer within [min, max] for rdzv_conf `key`.
absl::StatusOr<int64_t> ParseInteger(const std::string& key, const std::string& value, int64_t min, int64_t max) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < min || n > max) {
    return absl::InvalidArgumentError(absl::StrCat(key, "=", value, ": must be an integer ", min, "..", max));
  }
  return n;
}

// A positive integer within [1, max] for rdzv_conf `key`.
absl::StatusOr<int64_t> ParsePositive(const std::string& key, const std::string& value, int64_t max) {
  return ParseInteger(key, value, 1, max);
}

absl::StatusOr<bool> ParseBool(const std::string& key, const std::string& value) {
  std::string v = absl::AsciiStrToLower(value);
  if (v == "1" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "no") return false;
  return absl::InvalidArgumentError(absl::StrCat(key, "=", value, ": must be 0/1 or true/false"));
}

}  // namespace

absl::StatusOr<absl::Duration> ParseSeconds(const std::string& what, const std::string& value) {
  double s = 0;
  // NaN and infinities parse as numbers but are no timeout; a year bounds the rest.
  if (!absl::SimpleAtod(value, &s) || !std::isfinite(s) || s < 0 || s > 365.0 * 86400) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", value, ": must be a number of seconds, 0..31536000 (a year)"));
  }
  return absl::Seconds(s);
}

absl::Status ApplyRdzvConf(const std::string& text, LaunchConfig* config) {
  if (text.empty()) return absl::OkStatus();
  agent::AgentOptions& a = config->agent;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty() || kv[1].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--rdzv_conf: '", item, "' is not key=value"));
    }
    const std::string& key = kv[0];
    const std::string& value = kv[1];
    if (key == "join_timeout" || key == "timeout") {
      auto d = ParseSeconds(key, value);
      if (!d.ok()) return d.status();
      a.join_timeout = *d;
    } else if (key == "last_call_timeout") {
      auto d = ParseSeconds(key, value);
      if (!d.ok()) return d.status();
      a.last_call_timeout = *d;
    } else if (key == "close_timeout") {
      // torchrun: time to mark a round closed. meshrun closes a round in one
      // step on the server, so the value is checked and has no effect.
      auto d = ParseSeconds(key, value);
      if (!d.ok()) return d.status();
    } else if (key == "exit_barrier_timeout") {
      auto d = ParseSeconds(key, value);
      if (!d.ok()) return d.status();
      a.exit_barrier_timeout = *d;
    } else if (key == "exit_barrier_restart_grace") {
      auto d = ParseSeconds(key, value);
      if (!d.ok()) return d.status();
      a.exit_barrier_restart_grace = *d;
    } else if (key == "read_timeout") {
      auto d = ParseSeconds(key, value);
      if (!d.ok()) return d.status();
      if (*d <= absl::ZeroDuration()) return absl::InvalidArgumentError("read_timeout must be > 0");
      a.read_timeout = *d;
    } else if (key == "keep_alive_interval") {
      auto d = ParseSeconds(key, value);
      if (!d.ok()) return d.status();
      if (*d <= absl::ZeroDuration()) return absl::InvalidArgumentError("keep_alive_interval must be > 0");
      a.keep_alive_interval = *d;
    } else if (key == "server_silence_timeout") {
      auto d = ParseSeconds(key, value);
      if (!d.ok()) return d.status();
      if (*d <= absl::ZeroDuration()) return absl::InvalidArgumentError("server_silence_timeout must be > 0");
      a.server_silence_timeout = *d;
    } else if (key == "leader_grace") {
      auto d = ParseSeconds(key, value);
      if (!d.ok()) return d.status();
      if (*d <= absl::ZeroDuration()) return absl::InvalidArgumentError("leader_grace must be > 0");
      a.leader_grace = *d;
    } else if (key == "heartbeat_timeout") {
      auto d = ParseSeconds(key, value);
      if (!d.ok()) return d.status();
    } else if (key == "keep_alive_max_attempt") {
      int n = 0;
      if (!absl::SimpleAtoi(value, &n) || n <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(key, "=", value, ": must be a positive integer"));
      }
      a.keep_alive_max_attempt = n;
    } else if (key == "metrics_port") {
      int port = -1;
      if (!absl::SimpleAtoi(value, &port) || port < 0 || port > 65535) {
        return absl::InvalidArgumentError(absl::StrCat(key, "=", value, ": must be a TCP port 0..65535 (0: any free)"));
      }
      config->metrics_port = port;
    } else if (key == "health_port") {
      int port = -1;
      if (!absl::SimpleAtoi(value, &port) || port < 0 || port > 65535) {
        return absl::InvalidArgumentError(absl::StrCat(key, "=", value, ": must be a TCP port 0..65535 (0: any free)"));
      }
      config->health_port = port;
    } else if (key == "store_proxy_cache_bytes") {
      auto n = ParsePositive(key, value, int64_t{1} << 40);
      if (!n.ok()) return n.status();
      a.store_cache.max_cache_bytes = *n;
    } else if (key == "store_proxy_max_waiters") {
      auto n = ParsePositive(key, value, int64_t{1} << 24);
      if (!n.ok()) return n.status();
      a.store_cache.max_waiters = *n;
    } else if (key == "store_proxy_max_message_bytes") {
      auto n = ParsePositive(key, value, INT32_MAX);
      if (!n.ok()) return n.status();
      a.store_proxy_max_message_bytes = *n;
    } else if (key == "agent_store_max_connections") {
      auto n = ParsePositive(key, value, 1 << 20);
      if (!n.ok()) return n.status();
      a.agent_store_max_connections = static_cast<int>(*n);
    } else if (key == "leader_resend_interval") {
      auto d = ParseSeconds(key, value);
      if (!d.ok()) return d.status();
      if (*d < absl::Milliseconds(10)) {
        return absl::InvalidArgumentError(absl::StrCat("leader_resend_interval=", value, ": must be at least 0.01 seconds"));
      }
      a.leader_resend_interval = *d;
    } else if (key == "store_proxy_batch_hold") {
      auto d = ParseSeconds(key, value);
      if (!d.ok()) return d.status();
      a.store_proxy_batch_hold = *d;
    } else if (key == "token_file") {
      config->token_file = value;
    } else if (key == "tls_cert") {
      config->tls_files.cert = value;
    } else if (key == "tls_key") {
      config->tls_files.key = value;
    } else if (key == "tls_ca") {
      config->tls_files.ca = value;
    } else if (key == "use_libuv" || key == "store_type") {
      // torchrun 2.x's TCPStore settings: meshrun has no TCPStore (its
      // store is the rendezvous server's), so a line that names them runs
      // unchanged and is told so.
      if (key == "use_libuv") {
        if (auto b = ParseBool(key, value); !b.ok()) return b.status();
      }
      config->notes.push_back(absl::StrCat("--rdzv_conf ", key, "=", value,
                                           " has no effect: meshrun's agent store answers TCPStore's protocol with "
                                           "its own server, over the rendezvous server's store"));
    } else if (key == "agent_store_max_buffered_bytes") {
      auto n = ParsePositive(key, value, int64_t{1} << 40);
      if (!n.ok()) return n.status();
      a.agent_store_max_buffered_bytes = *n;
    } else if (key == "agent_store_max_waits") {
      auto n = ParsePositive(key, value, 1 << 20);
      if (!n.ok()) return n.status();
      a.agent_store_max_waits = static_cast<int>(*n);
    } else if (key == "agent_store_max_listed_keys") {
      auto n = ParsePositive(key, value, 262144);  // The server's max_keys_per_run.
      if (!n.ok()) return n.status();
      a.agent_store_max_listed_keys = *n;
    } else if (key == "agent_store_read_cache_bytes") {
      auto n = ParseInteger(key, value, 0, int64_t{1} << 40);
      if (!n.ok()) return n.status();
      a.agent_store_read_cache_bytes = *n;
    } else if (key == "lighthouse") {
      auto b = ParseBool(key, value);
      if (!b.ok()) return b.status();
      a.lighthouse.enabled = *b;
    } else if (key == "lighthouse_run") {
      if (value.empty() || value.size() > 256) {
        return absl::InvalidArgumentError(absl::StrCat(key, "=", value.substr(0, 64), ": must be 1..256 bytes"));
      }
      a.lighthouse.run_id = value;
    } else if (key == "lighthouse_min_replicas") {
      auto n = ParsePositive(key, value, 1 << 20);
      if (!n.ok()) return n.status();
      a.lighthouse.min_replicas = *n;
    } else if (key == "lighthouse_max_calls") {
      auto n = ParsePositive(key, value, 1 << 20);
      if (!n.ok()) return n.status();
      a.lighthouse.max_calls = *n;
    } else if (key == "lighthouse_join_timeout" || key == "lighthouse_quorum_tick" ||
               key == "lighthouse_heartbeat_timeout") {
      auto d = ParseSeconds(key, value);
      if (!d.ok()) return d.status();
      const bool tick = key == "lighthouse_quorum_tick";
      if (*d < absl::Milliseconds(tick ? 10 : 1) || (tick && *d > absl::Seconds(60))) {
        return absl::InvalidArgumentError(absl::StrCat(key, "=", value, ": must be a number of seconds, ",
                                                       tick ? "0.01..60" : "at least 0.001"));
      }
      (key == "lighthouse_join_timeout"   ? a.lighthouse.join_timeout
       : key == "lighthouse_quorum_tick" ? a.lighthouse.quorum_tick
                                         : a.lighthouse.heartbeat_timeout) = *d;
    } else if (key == "agent_store") {
      auto b = ParseBool(key, value);
      if (!b.ok()) return b.status();
      a.agent_store_enabled = *b;
    } else if (key == "server_port") {
      auto n = ParsePositive(key, value, 65535);
      if (!n.ok()) return n.status();
      config->static_server_port = static_cast<int>(*n);
    } else if (key == "is_host") {
      auto b = ParseBool(key, value);
      if (!b.ok()) return b.status();
      config->is_host = *b;
    } else if (absl::Status s = rendezvous::SetLimit(key, value, &config->server_limits); !absl::IsNotFound(s)) {
      // A server limit, for the embedded server this node may host.
      if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("--rdzv_conf: ", s.message()));
    } else {
      std::vector<std::string> known(std::begin(kRdzvConfKeys), std::end(kRdzvConfKeys));
      for (std::string& l : rendezvous::LimitNameList()) known.push_back(std::move(l));
      std::vector<std::string> near = NearestNames(key, known);
      return absl::InvalidArgumentError(absl::StrCat(
          "--rdzv_conf: unknown key '", key, "'",
          near.empty() ? "" : absl::StrCat("; did you mean ", absl::StrJoin(near, " or "), "?"),
          " (every key: docs/user-guide.md, --rdzv_conf and Server limits)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace meshrun::launcher
