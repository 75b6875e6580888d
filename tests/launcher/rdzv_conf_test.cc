// --rdzv_conf parsing (launcher/rdzv_conf.h): torchrun's keys, meshrun's own,
// and the one-line errors for bad values.
#include <catch2/catch.hpp>

#include <string>

#include "launcher/rdzv_conf.h"

using namespace meshrun::launcher;

TEST_CASE("rdzv_conf takes torchrun's keys and names unknown ones", "[flags]") {
  LaunchConfig c;
  REQUIRE(ApplyRdzvConf("join_timeout=5,last_call_timeout=0.5,is_host=0,read_timeout=7", &c).ok());
  CHECK(c.agent.join_timeout == absl::Seconds(5));
  CHECK(c.agent.last_call_timeout == absl::Milliseconds(500));
  CHECK(c.agent.read_timeout == absl::Seconds(7));
  REQUIRE(c.is_host.has_value());
  CHECK_FALSE(*c.is_host);
  absl::Status bad = ApplyRdzvConf("bogus=1", &c);
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.message()) ==
        "--rdzv_conf: unknown key 'bogus' (every key: docs/user-guide.md, --rdzv_conf and Server limits)");
  // A misspelling gets the nearest keys, not all fifty.
  absl::Status near = ApplyRdzvConf("join_timout=1", &c);
  REQUIRE_FALSE(near.ok());
  CHECK(std::string(near.message()) ==
        "--rdzv_conf: unknown key 'join_timout'; did you mean join_timeout? (every key: docs/user-guide.md, "
        "--rdzv_conf and Server limits)");
  absl::Status limit = ApplyRdzvConf("max_run=4", &c);
  REQUIRE_FALSE(limit.ok());
  CHECK(std::string(limit.message()).find("did you mean max_runs") != std::string::npos);
  CHECK_FALSE(ApplyRdzvConf("join_timeout=abc", &c).ok());
  CHECK_FALSE(ApplyRdzvConf("novalue", &c).ok());
  // Numbers that are no timeout: NaN, infinities, negatives, past a year.
  for (const char* v : {"nan", "inf", "-inf", "-1", "1e300"}) {
    absl::Status s = ApplyRdzvConf(std::string("join_timeout=") + v, &c);
    REQUIRE_FALSE(s.ok());
    CHECK(std::string(s.message()) ==
          std::string("join_timeout=") + v + ": must be a number of seconds, 0..31536000 (a year)");
  }
}

TEST_CASE("rdzv_conf takes the exit barrier's settings", "[flags]") {
  LaunchConfig c;
  CHECK(c.agent.exit_barrier_restart_grace == absl::Seconds(2));
  REQUIRE(ApplyRdzvConf("exit_barrier_timeout=30,exit_barrier_restart_grace=0.25", &c).ok());
  CHECK(c.agent.exit_barrier_timeout == absl::Seconds(30));
  CHECK(c.agent.exit_barrier_restart_grace == absl::Milliseconds(250));
  REQUIRE(ApplyRdzvConf("exit_barrier_restart_grace=0", &c).ok());
  CHECK(c.agent.exit_barrier_restart_grace == absl::ZeroDuration());
  absl::Status bad = ApplyRdzvConf("exit_barrier_restart_grace=-1", &c);
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.message()) ==
        "exit_barrier_restart_grace=-1: must be a number of seconds, 0..31536000 (a year)");
}

TEST_CASE("rdzv_conf takes token_file and the TLS files", "[flags]") {
  LaunchConfig c;
  REQUIRE(ApplyRdzvConf("token_file=/t,tls_cert=/c.pem,tls_key=/k.pem,tls_ca=/ca.pem", &c).ok());
  CHECK(c.token_file == "/t");
  CHECK(c.tls_files.cert == "/c.pem");
  CHECK(c.tls_files.key == "/k.pem");
  CHECK(c.tls_files.ca == "/ca.pem");
  absl::Status bad = ApplyRdzvConf("tls_cs=/ca.pem", &c);
  CHECK(std::string(bad.message()).find("did you mean tls_ca") != std::string::npos);
}

TEST_CASE("seconds: a year at most, no NaN or infinity, the setting named in the error", "[flags]") {
  CHECK(*ParseSeconds("--shutdown_timeout", "2.5") == absl::Milliseconds(2500));
  CHECK(*ParseSeconds("x", "31536000") == absl::Seconds(31536000));
  absl::StatusOr<absl::Duration> bad = ParseSeconds("--shutdown_timeout", "soon");
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()) ==
        "--shutdown_timeout=soon: must be a number of seconds, 0..31536000 (a year)");
  CHECK_FALSE(ParseSeconds("x", "31536001").ok());
}

TEST_CASE("rdzv_conf takes the store proxy's settings and refuses bad ones with one line", "[flags]") {
  LaunchConfig c;
  REQUIRE(ApplyRdzvConf("store_proxy_batch_hold=0.25,store_proxy_max_waiters=10,store_proxy_cache_bytes=1024", &c)
              .ok());
  CHECK(c.agent.store_proxy_batch_hold == absl::Milliseconds(250));
  CHECK(c.agent.store_cache.max_waiters == 10);
  CHECK(c.agent.store_cache.max_cache_bytes == 1024);
  REQUIRE(ApplyRdzvConf("store_proxy_batch_hold=0", &c).ok());  // Not held.
  CHECK(c.agent.store_proxy_batch_hold == absl::ZeroDuration());
  absl::Status s = ApplyRdzvConf("store_proxy_batch_hold=-1", &c);
  REQUIRE_FALSE(s.ok());
  CHECK(std::string(s.message()) == "store_proxy_batch_hold=-1: must be a number of seconds, 0..31536000 (a year)");
  CHECK_FALSE(ApplyRdzvConf("store_proxy_max_waiters=0", &c).ok());
  CHECK(c.agent.leader_resend_interval == absl::Seconds(1));
  REQUIRE(ApplyRdzvConf("leader_resend_interval=0.25", &c).ok());
  CHECK(c.agent.leader_resend_interval == absl::Milliseconds(250));
  s = ApplyRdzvConf("leader_resend_interval=0.001", &c);
  REQUIRE_FALSE(s.ok());
  CHECK(std::string(s.message()) == "leader_resend_interval=0.001: must be at least 0.01 seconds");
}

TEST_CASE("rdzv_conf takes the agent store's settings and refuses bad ones with one line", "[flags]") {
  LaunchConfig c;
  CHECK(c.agent.agent_store_enabled);
  CHECK(c.static_server_port == 0);
  REQUIRE(ApplyRdzvConf("agent_store=0,server_port=29411,agent_store_max_connections=64,"
                        "agent_store_max_buffered_bytes=1048576,agent_store_max_waits=99,"
                        "agent_store_max_listed_keys=7", &c).ok());
  CHECK(c.agent.agent_store_max_waits == 99);
  CHECK(c.agent.agent_store_max_listed_keys == 7);
  CHECK(c.agent.agent_store_max_buffered_bytes == 1048576);
  CHECK_FALSE(c.agent.agent_store_enabled);
  CHECK(c.static_server_port == 29411);
  CHECK(c.agent.agent_store_max_connections == 64);
  absl::Status s = ApplyRdzvConf("server_port=70000", &c);
  REQUIRE_FALSE(s.ok());
  CHECK(std::string(s.message()) == "server_port=70000: must be an integer 1..65535");
  CHECK_FALSE(ApplyRdzvConf("agent_store=maybe", &c).ok());
  CHECK_FALSE(ApplyRdzvConf("agent_store_max_connections=0", &c).ok());
  CHECK(c.agent.agent_store_read_cache_bytes == int64_t{64} << 20);
  REQUIRE(ApplyRdzvConf("agent_store_read_cache_bytes=0", &c).ok());  // Off.
  CHECK(c.agent.agent_store_read_cache_bytes == 0);
  s = ApplyRdzvConf("agent_store_read_cache_bytes=-1", &c);
  REQUIRE_FALSE(s.ok());
  CHECK(std::string(s.message()) == "agent_store_read_cache_bytes=-1: must be an integer 0..1099511627776");
}

TEST_CASE("rdzv_conf takes the lighthouse's settings and refuses bad ones with one line", "[flags]") {
  LaunchConfig c;
  CHECK(c.agent.lighthouse.enabled);
  CHECK(c.agent.lighthouse.min_replicas == 0);  // The server's default: torchft's.
  REQUIRE(ApplyRdzvConf("lighthouse_min_replicas=3,lighthouse_join_timeout=30,lighthouse_quorum_tick=0.05,"
                        "lighthouse_heartbeat_timeout=2.5", &c).ok());
  CHECK(c.agent.lighthouse.min_replicas == 3);
  CHECK(c.agent.lighthouse.join_timeout == absl::Seconds(30));
  CHECK(c.agent.lighthouse.quorum_tick == absl::Milliseconds(50));
  CHECK(c.agent.lighthouse.heartbeat_timeout == absl::Milliseconds(2500));
  REQUIRE(ApplyRdzvConf("lighthouse_run=llama-ft", &c).ok());
  CHECK(c.agent.lighthouse.run_id == "llama-ft");
  CHECK_FALSE(ApplyRdzvConf("lighthouse_run=", &c).ok());
  REQUIRE(ApplyRdzvConf("lighthouse=0", &c).ok());
  CHECK_FALSE(c.agent.lighthouse.enabled);
  absl::Status s = ApplyRdzvConf("lighthouse_quorum_tick=0", &c);
  REQUIRE_FALSE(s.ok());
  CHECK(std::string(s.message()) == "lighthouse_quorum_tick=0: must be a number of seconds, 0.01..60");
  CHECK_FALSE(ApplyRdzvConf("lighthouse_quorum_tick=61", &c).ok());
  CHECK_FALSE(ApplyRdzvConf("lighthouse_join_timeout=0", &c).ok());
  CHECK_FALSE(ApplyRdzvConf("lighthouse_min_replicas=0", &c).ok());
  CHECK_FALSE(ApplyRdzvConf("lighthouse_join_timeout=-1", &c).ok());
  CHECK_FALSE(ApplyRdzvConf("lighthouse=sometimes", &c).ok());
  CHECK(c.agent.lighthouse.max_calls == 1024);
  REQUIRE(ApplyRdzvConf("lighthouse_max_calls=16", &c).ok());
  CHECK(c.agent.lighthouse.max_calls == 16);
  s = ApplyRdzvConf("lighthouse_max_calls=0", &c);
  REQUIRE_FALSE(s.ok());
  CHECK(std::string(s.message()) == "lighthouse_max_calls=0: must be an integer 1..1048576");
}

TEST_CASE("rdzv_conf accepts torchrun 2.x's use_libuv and store_type with a note, and a repeated key's last value",
          "[flags]") {
  LaunchConfig c;
  REQUIRE(ApplyRdzvConf("use_libuv=1,store_type=tcp,join_timeout=1,join_timeout=2", &c).ok());
  CHECK(c.agent.join_timeout == absl::Seconds(2));
  REQUIRE(c.notes.size() == 2);
  CHECK(c.notes[0] == "--rdzv_conf use_libuv=1 has no effect: meshrun's agent store answers TCPStore's protocol with "
                      "its own server, over the rendezvous server's store");
  CHECK(c.notes[1].find("store_type=tcp has no effect") != std::string::npos);
  absl::Status bad = ApplyRdzvConf("use_libuv=maybe", &c);
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.message()) == "use_libuv=maybe: must be 0/1 or true/false");
}
