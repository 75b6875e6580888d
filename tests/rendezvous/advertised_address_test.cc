#include <catch2/catch.hpp>

#include "common/setting.h"

#include <sys/socket.h>

#include "common/net.h"
#include "rendezvous/run/advertised_address.h"
#include "proto/wire.h"

using namespace meshrun::rendezvous;

namespace {

NodeDesc Node(std::string host, std::string seen, std::string dialed, std::string local_addr = "") {
  NodeDesc n;
  n.node_id = host + ":1";
  n.hostname = std::move(host);
  n.addr = std::move(seen);
  n.dialed_addr = std::move(dialed);
  n.local_addr = std::move(local_addr);
  return n;
}

}  // namespace

TEST_CASE("every node on loopback: one host, loopback kept", "[addresses]") {
  std::vector<NodeDesc> nodes{Node("a", "127.0.0.1", "127.0.0.1"), Node("a", "127.0.0.1", "127.0.0.1")};
  REQUIRE(DecideAddresses(nodes).ok());
  CHECK(nodes[0].addr == "127.0.0.1");
  CHECK(nodes[1].addr == "127.0.0.1");
}

TEST_CASE("the server's host takes the address the others dialed (Debian's 127.0.1.1)", "[addresses]") {
  std::vector<NodeDesc> nodes{Node("host0", "127.0.1.1", "127.0.1.1"), Node("host1", "192.168.64.11", "192.168.64.10"),
                              Node("host2", "192.168.64.12", "192.168.64.10")};
  REQUIRE(DecideAddresses(nodes).ok());
  CHECK(nodes[0].addr == "192.168.64.10");
  CHECK(nodes[1].addr == "192.168.64.11");
  CHECK(nodes[2].addr == "192.168.64.12");
}

TEST_CASE("the most common dialed address wins, ties go to the smallest", "[addresses]") {
  std::vector<NodeDesc> nodes{Node("host0", "127.0.0.1", "127.0.0.1"), Node("h1", "10.0.0.11", "10.0.0.9"),
                              Node("h2", "10.0.0.12", "10.0.0.10"), Node("h3", "10.0.0.13", "10.0.0.10")};
  REQUIRE(DecideAddresses(nodes).ok());
  CHECK(nodes[0].addr == "10.0.0.10");
  std::vector<NodeDesc> tie{Node("host0", "::1", "::1"), Node("h1", "fd00::11", "fd00::b"), Node("h2", "fd00::12", "fd00::a")};
  REQUIRE(DecideAddresses(tie).ok());
  CHECK(tie[0].addr == "fd00::a");
}

TEST_CASE("an explicit advertised address is kept, and refused when loopback in a multi-host job", "[addresses]") {
  std::vector<NodeDesc> ok{Node("host0", "192.168.64.10", "127.0.1.1", "192.168.64.10"),
                           Node("host1", "192.168.64.11", "192.168.64.10")};
  REQUIRE(DecideAddresses(ok).ok());
  CHECK(ok[0].addr == "192.168.64.10");
  std::vector<NodeDesc> bad{Node("host0", "127.0.1.1", "127.0.1.1", "host0"),
                            Node("host1", "192.168.64.11", "192.168.64.10")};
  absl::Status s = DecideAddresses(bad);
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("its advertised address host0 is the loopback address "
                                                       "127.0.1.1") &&
                                           Catch::Contains("node host0"));
  CHECK(meshrun::SettingOf(s) == std::string(meshrun::kAdvertisedAddress));  // The agent names its flag.
}

TEST_CASE("a loopback node with nobody reporting a dialed address is refused", "[addresses]") {
  std::vector<NodeDesc> nodes{Node("host0", "127.0.1.1", ""), Node("host1", "192.168.64.11", "")};
  absl::Status s = DecideAddresses(nodes);
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("give it an advertised address"));
  CHECK(meshrun::SettingOf(s) == std::string(meshrun::kAdvertisedAddress));
}

TEST_CASE("gRPC peer strings give the numeric address", "[addresses]") {
  using meshrun::rendezvous::wire::PeerIp;
  CHECK(PeerIp("ipv4:192.168.64.11:40000") == "192.168.64.11");
  CHECK(PeerIp("ipv6:[fd6d:72::11]:40000") == "fd6d:72::11");
  CHECK(PeerIp("ipv6:%5Bfd6d:72::11%5D:40000") == "fd6d:72::11");
  CHECK(PeerIp("ipv6:[::ffff:192.168.64.11]:40000") == "192.168.64.11");
  CHECK(PeerIp("ipv6:[fe80::1%25eth0]:5") == "fe80::1");
  CHECK(PeerIp("unix:/tmp/sock").empty());
  CHECK(PeerIp("ipv6:fd00::1").empty());
  CHECK(PeerIp("ipv4:192.168.64.11").empty());  // No port: not a form gRPC writes.
}

TEST_CASE("gRPC peer strings split into family, address and port", "[addresses]") {
  using meshrun::SplitPeer;
  auto v4 = SplitPeer("ipv4:10.0.0.1:29400");
  REQUIRE(v4.has_value());
  CHECK(v4->family == AF_INET);
  CHECK(v4->address == "10.0.0.1");
  CHECK(v4->port == 29400);
  for (const char* peer : {"ipv6:[fd00::1]:65535", "ipv6:%5Bfd00::1%5D:65535"}) {
    auto v6 = SplitPeer(peer);
    REQUIRE(v6.has_value());
    CHECK(v6->family == AF_INET6);
    CHECK(v6->address == "fd00::1");
    CHECK(v6->port == 65535);
  }
  auto zoned = SplitPeer("ipv6:%5Bfe80::1%25eth0%5D:5");
  REQUIRE(zoned.has_value());
  CHECK(zoned->address == "fe80::1%25eth0");
  for (const char* bad : {"", "ipv4:", "ipv4:10.0.0.1", "ipv4:10.0.0.1:", "ipv4::5", "ipv4:10.0.0.1:65536",
                          "ipv4:10.0.0.1:-1", "ipv6:fd00::1", "ipv6:[fd00::1]", "ipv6:[fd00::1]:x",
                          "ipv6:%5Bfd00::1]:5", "unix:/tmp/sock", "ipv4"}) {
    INFO(bad);
    CHECK_FALSE(SplitPeer(bad).has_value());
  }
}

TEST_CASE("the interface holding an address", "[addresses]") {
  CHECK(*meshrun::InterfaceOf("127.0.0.1") == "lo");
  CHECK(*meshrun::InterfaceOf("127.0.1.1") == "lo");
  auto none = meshrun::InterfaceOf("203.0.113.77");
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(std::string(none.status().message()), Catch::Contains("203.0.113.77"));
}
