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
  CHECK(std::string(bad.message()).find("bogus") != std::string::npos);
  CHECK(std::string(bad.message()).find("join_timeout") != std::string::npos);
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

TEST_CASE("rdzv_conf takes token_file and the TLS files", "[flags]") {
  LaunchConfig c;
  REQUIRE(ApplyRdzvConf("token_file=/t,tls_cert=/c.pem,tls_key=/k.pem,tls_ca=/ca.pem", &c).ok());
  CHECK(c.token_file == "/t");
  CHECK(c.tls_files.cert == "/c.pem");
  CHECK(c.tls_files.key == "/k.pem");
  CHECK(c.tls_files.ca == "/ca.pem");
  absl::Status bad = ApplyRdzvConf("bogus=1", &c);
  CHECK(std::string(bad.message()).find("tls_ca") != std::string::npos);
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
}
