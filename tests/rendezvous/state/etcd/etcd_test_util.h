// Helpers of the etcd tests (tests/rendezvous/state/etcd/): clients of a test
// cluster, bounded waits on conditions, and the skip when etcd is missing.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/endpoint.h"
#include "rendezvous/state/etcd/client/etcd_client.h"
#include "rendezvous/state/etcd/election.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/skip.h"

namespace meshrun::testing {

namespace etcd = ::meshrun::rendezvous::state::etcd;

// Latency bounds hold in the plain build only (tests/e2e/e2e_util.h's rule);
// the sanitizer build prints the figures.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kEtcdTimingBounds = false;
#else
inline constexpr bool kEtcdTimingBounds = true;
#endif

#define MESHRUN_REQUIRE_ETCD()                                                                     \
  do {                                                                                             \
    if (::meshrun::testing::EtcdCluster::EtcdBinary().empty()) {                                   \
      MESHRUN_SKIP("etcd is not installed (Debian's etcd-server: bash scripts/install-deps.sh)");  \
    }                                                                                              \
  } while (false)

// REQUIRE(cond), showing `msg` when it fails.
// `msg` is read after `cond` ran (an INFO before it would capture an error()
// not yet set).
#define REQUIRE_MSG(cond, msg)           \
  do {                                   \
    const bool require_msg_ok_ = (cond); \
    INFO(msg);                           \
    REQUIRE(require_msg_ok_);            \
  } while (false)

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Polls `cond` every 20 ms until it holds or `timeout_s` passed; true when it held.
inline bool WaitFor(const std::function<bool()>& cond, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    if (cond()) return true;
    if (SecondsSince(t0) >= timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Client options for a test cluster: its members in `order` (all, in order,
// when empty), and the tests' timeouts.
inline etcd::ClientOptions TestClientOptions(const EtcdCluster& cluster, std::vector<int> order = {}) {
  if (order.empty()) {
    for (int i = 0; i < cluster.size(); ++i) order.push_back(i);
  }
  etcd::ClientOptions o;
  for (int i : order) {
    const std::string addr = cluster.ClientAddress(i);
    const size_t colon = addr.rfind(':');
    o.members.push_back(Endpoint{addr.substr(0, colon), std::stoi(addr.substr(colon + 1))});
  }
  o.call_timeout = absl::Seconds(3);
  o.attempt_timeout = absl::Seconds(1);
  o.dial_timeout = absl::Milliseconds(500);
  o.probe_timeout = absl::Milliseconds(500);
  return o;
}

inline std::unique_ptr<etcd::Client> TestClient(const etcd::ClientOptions& o) {
  absl::StatusOr<std::unique_ptr<etcd::Client>> c = etcd::Client::Create(o);
  if (!c.ok()) return nullptr;
  return std::move(*c);
}

inline bool OneLine(const absl::Status& s) { return std::string(s.message()).find('\n') == std::string::npos; }
inline bool Mentions(const absl::Status& s, const std::string& part) {
  return std::string(s.message()).find(part) != std::string::npos;
}

// Events and state changes a watch delivered, read from the test's thread.
struct WatchLog {
  std::mutex mu;
  std::vector<etcd::WatchEvent> events;
  std::vector<etcd::WatchStatus> statuses;
  etcd::WatchCallbacks Callbacks() {
    etcd::WatchCallbacks cb;
    cb.on_event = [this](const etcd::WatchEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      events.push_back(e);
    };
    cb.on_status = [this](const etcd::WatchStatus& s) {
      std::lock_guard<std::mutex> lock(mu);
      statuses.push_back(s);
    };
    return cb;
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return events.size();
  }
};

// An election under "<prefix>/election/" (a 2 s lease) that `client` has
// won, as "me": for tests of a leader's fenced writes. REQUIREs that it
// leads within 10 s.
inline std::unique_ptr<etcd::Election> LeadingElection(etcd::Client* client, const std::string& prefix) {
  etcd::ElectionOptions eo;
  eo.prefix = prefix + "/election/";
  eo.lease_ttl_s = 2;
  auto election = std::make_unique<etcd::Election>(client, eo);
  REQUIRE(election->Campaign("me", "me", {}).ok());
  REQUIRE(WaitFor([&] { return election->IsLeader(); }, 10));
  return election;
}

}  // namespace meshrun::testing
