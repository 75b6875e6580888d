// The server's own counts of connections and store requests per node.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/match.h"
#include "rendezvous/server/metrics.h"
#include "rendezvous/server/traffic_counters.h"

using namespace meshrun::rendezvous;

TEST_CASE("traffic: a connection counts at its first call, again only after it was forgotten", "[traffic]") {
  TrafficOptions o;
  o.forget_after = absl::Minutes(5);
  TrafficCounters t(o);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  CHECK(t.OnCall("ipv4:127.0.0.1:40000", t0));
  CHECK_FALSE(t.OnCall("ipv4:127.0.0.1:40000", t0 + absl::Seconds(1)));
  CHECK(t.OnCall("ipv4:127.0.0.1:40002", t0 + absl::Seconds(1)));
  CHECK_FALSE(t.OnCall("ipv4:127.0.0.1:40000", t0 + absl::Minutes(4)));  // Still in use.
  CHECK(t.Snapshot().connections_accepted == 2);
  // Silent past forget_after (the server closed it as idle): a new one.
  CHECK(t.OnCall("ipv4:127.0.0.1:40002", t0 + absl::Minutes(11)));
  CHECK(t.Snapshot().connections_accepted == 3);
  CHECK(t.Snapshot().peers_remembered == 1);  // 40000 was swept.
}

TEST_CASE("traffic: bounded: more peers than remembered are counted (too often, never too few)", "[traffic]") {
  TrafficOptions o;
  o.max_peers = 2;
  o.max_nodes = 2;
  o.max_node_bytes = 8;
  TrafficCounters t(o);
  const absl::Time now = absl::Now();
  for (int i = 0; i < 3; ++i) t.OnCall("ipv4:10.0.0.1:" + std::to_string(5000 + i), now);
  CHECK(t.OnCall("ipv4:10.0.0.1:5002", now));  // Not remembered: counted again.
  CHECK(t.Snapshot().connections_accepted == 4);
  t.OnStoreRequest("run", "node-a-with-a-long-name", 3);
  t.OnStoreRequest("run", "", 1);
  t.OnStoreRequest("run", "node-b", 0);
  t.OnStoreRequest("run", "node-a-with-a-long-name", 2);
  TrafficSnapshot s = t.Snapshot();
  CHECK(s.store_requests_by_node == std::map<std::string, int64_t>{{"(direct)", 1}, {"(other)", 1}, {"node-a-w", 2}});
  CHECK(s.store_keys_read_by_node == std::map<std::string, int64_t>{{"(direct)", 1}, {"(other)", 0}, {"node-a-w", 5}});
  // A further run's nodes count under "(other)" too, until room is made.
  t.OnStoreRequest("run-2", "node-c", 0);
  CHECK(t.Snapshot().store_requests_by_node.at("(other)") == 2);
  CHECK(t.SnapshotOf("run-2").store_requests_by_node.empty());
  const std::string text =
      prometheus::TextSerializer().Serialize(meshrun::rendezvous::ServerMetrics::TrafficFamilies(t.Snapshot()));
  CHECK(absl::StrContains(text, "meshrun_connections_accepted_total 4\n"));
  CHECK(absl::StrContains(text, "meshrun_store_requests_total{node=\"node-a-w\"} 2\n"));
  CHECK(absl::StrContains(text, "meshrun_store_keys_read_total{node=\"(direct)\"} 1\n"));
}

TEST_CASE("traffic: a connection's key is the family, port and address of gRPC's peer string", "[traffic]") {
  auto key = [](const char* peer) { return ConnectionKeyOf(peer); };
  // ipv4: family, port (big-endian), 4 address bytes, zeros.
  const ConnectionKey v4{AF_INET, 0x13, 0x88, 127, 0, 0, 1};
  REQUIRE(key("ipv4:127.0.0.1:5000").has_value());
  CHECK(*key("ipv4:127.0.0.1:5000") == v4);
  // ipv6 as gRPC 1.51 writes it (brackets percent-encoded), and plain.
  ConnectionKey v6{AF_INET6, 0x9c, 0x40};
  v6[18] = 1;  // ::1
  REQUIRE(key("ipv6:%5B::1%5D:40000").has_value());
  CHECK(*key("ipv6:%5B::1%5D:40000") == v6);
  CHECK(key("ipv6:[::1]:40000") == key("ipv6:%5B::1%5D:40000"));
  CHECK(key("ipv6:%5B::ffff:127.0.0.1%5D:5000").has_value());
  CHECK(key("ipv6:%5B::ffff:127.0.0.1%5D:5000") != key("ipv4:127.0.0.1:5000"));  // Exact, not mapped.
  CHECK(key("ipv4:127.0.0.1:5001") != key("ipv4:127.0.0.1:5000"));
  // Not keyed: other forms, a zone (it would be lost), malformed ones.
  for (const char* other : {"unix:/tmp/a.sock", "ipv6:%5Bfe80::1%25eth0%5D:5000", "ipv6:[fe80::1%25eth0]:5000",
                            "ipv4:127.0.0.1", "ipv4:999.0.0.1:5000", "ipv4:127.0.0.1:70000", "ipv6:::1:5000",
                            "ipv4:127.0.0.1:", "ipv4:127.0.0.1:x", ""}) {
    INFO(other);
    CHECK_FALSE(key(other).has_value());
  }
}

TEST_CASE("traffic: keyed and other address forms are each remembered exactly", "[traffic]") {
  TrafficCounters t;
  const absl::Time now = absl::FromUnixSeconds(1000);
  const char* distinct[] = {"ipv4:127.0.0.1:5000",  "ipv4:127.0.0.1:5001",       "ipv4:127.0.0.2:5000",
                            "ipv6:%5B::1%5D:5000",  "ipv6:%5B::1%5D:5001",       "ipv6:%5Bfe80::1%25eth0%5D:5000",
                            "unix:/tmp/a.sock",     "ipv4:127.0.0.1",            "ipv6:%5Bfe80::1%25eth1%5D:5000"};
  for (const char* peer : distinct) {
    INFO(peer);
    CHECK(t.OnCall(peer, now));                           // A new connection...
    CHECK_FALSE(t.OnCall(peer, now + absl::Seconds(1)));  // ...remembered.
  }
  CHECK_FALSE(t.OnCall("ipv6:[::1]:5000", now));  // The same connection, either spelling.
  CHECK(t.Snapshot().connections_accepted == 9);
  CHECK(t.Snapshot().peers_remembered == 9);
  // Forgotten after forget_after, whatever their form.
  CHECK(t.OnCall("ipv4:10.0.0.1:1", now + absl::Minutes(20)));
  CHECK(t.Snapshot().peers_remembered == 1);
}

TEST_CASE("traffic: store requests are counted per run, one run's snapshot is its nodes only, a removed run's are "
          "forgotten",
          "[traffic]") {
  TrafficOptions o;
  o.max_nodes = 3;
  TrafficCounters t(o);
  t.OnStoreRequest("a", "node-1", 2);
  t.OnStoreRequest("a", "node-2", 0);
  t.OnStoreRequest("b", "node-3", 1);
  t.OnStoreRequest("b", "", 4);  // Past max_nodes: (other), of no run.
  CHECK(t.SnapshotOf("a").store_requests_by_node == std::map<std::string, int64_t>{{"node-1", 1}, {"node-2", 1}});
  CHECK(t.SnapshotOf("a").store_keys_read_by_node == std::map<std::string, int64_t>{{"node-1", 2}, {"node-2", 0}});
  CHECK(t.SnapshotOf("b").store_requests_by_node == std::map<std::string, int64_t>{{"node-3", 1}});
  CHECK(t.SnapshotOf("c").store_requests_by_node.empty());
  CHECK(t.Snapshot().store_requests_by_node ==
        std::map<std::string, int64_t>{{"(other)", 1}, {"node-1", 1}, {"node-2", 1}, {"node-3", 1}});
  // Run "a" removed: its two nodes are forgotten and make room.
  t.ForgetRun("a");
  t.ForgetRun("a");  // Twice, or an unknown run: nothing.
  t.ForgetRun("");   // The counts past the limit are of no run: kept.
  CHECK(t.SnapshotOf("a").store_requests_by_node.empty());
  t.OnStoreRequest("b", "", 1);
  t.OnStoreRequest("d", "node-4", 1);
  CHECK(t.Snapshot().store_requests_by_node ==
        std::map<std::string, int64_t>{{"(direct)", 1}, {"(other)", 1}, {"node-3", 1}, {"node-4", 1}});
  // The same node name in two runs: summed server-wide, apart per run.
  t.ForgetRun("d");
  t.OnStoreRequest("e", "node-3", 1);
  CHECK(t.Snapshot().store_requests_by_node.at("node-3") == 2);
  CHECK(t.SnapshotOf("e").store_requests_by_node.at("node-3") == 1);
  // "(direct)" is every run's name for clients that name no node: a removed
  // run's share stays in the server-wide count (a Prometheus counter never
  // goes down), not in any run's.
  t.ForgetRun("b");
  CHECK(t.SnapshotOf("b").store_requests_by_node.empty());
  CHECK(t.Snapshot().store_requests_by_node.at("(direct)") == 1);
  CHECK(t.Snapshot().store_keys_read_by_node.at("(direct)") == 1);
  CHECK(t.Snapshot().store_requests_by_node.count("node-3") == 1);  // e's.
}

TEST_CASE("traffic: the count of remembered connections grows only with connections it can remember",
          "[traffic]") {
  TrafficOptions o;
  o.max_peers = 2;
  TrafficCounters t(o);
  const absl::Time now = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 2; ++i) t.OnCall("ipv4:10.0.0.1:" + std::to_string(5000 + i), now);
  CHECK(t.connections_remembered() == 2);
  // Past max_peers, each call of an unremembered connection counts as
  // accepted again, but not as a new remembered one.
  for (int i = 0; i < 5; ++i) CHECK(t.OnCall("ipv4:10.0.0.1:6000", now));
  CHECK(t.Snapshot().connections_accepted == 7);
  CHECK(t.connections_remembered() == 2);
}
