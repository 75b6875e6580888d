#include <catch2/catch.hpp>

#include "common/endpoint.h"
#include "common/store.h"

using meshrun::ParseEndpoint;

TEST_CASE("endpoints parse in torchrun's forms", "[common]") {
  auto a = ParseEndpoint("node1:29500", 29400);
  REQUIRE(a.ok());
  CHECK(a->host == "node1");
  CHECK(a->port == 29500);
  auto b = ParseEndpoint("10.1.2.3", 29400);
  REQUIRE(b.ok());
  CHECK(b->port == 29400);
  auto c = ParseEndpoint("[fe80::1]:1234", 29400);
  REQUIRE(c.ok());
  CHECK(c->host == "fe80::1");
  CHECK(c->port == 1234);
  CHECK(c->ToString() == "[fe80::1]:1234");
  auto d = ParseEndpoint("[::1]", 29400);
  REQUIRE(d.ok());
  CHECK(d->port == 29400);
}

TEST_CASE("an endpoint with a URL scheme is refused as such, not as an ambiguous IPv6 address", "[common]") {
  for (const char* text : {"http://host:29400", "grpc://10.0.0.1:29400", "https://[::1]:1"}) {
    auto e = ParseEndpoint(text, 29400);
    REQUIRE_FALSE(e.ok());
    const std::string m(e.status().message());
    CHECK(m.find("a URL scheme") != std::string::npos);
    CHECK(m.find("is not allowed: give host:port") != std::string::npos);
    CHECK(m.find("ambiguous") == std::string::npos);
  }
  CHECK(std::string(ParseEndpoint("http://host:29400", 1).status().message()) ==
        "invalid endpoint 'http://host:29400': a URL scheme ('http://') is not allowed: give host:port; allowed: "
        "host, host:port, 1.2.3.4:port, [v6addr]:port");
  CHECK(meshrun::HostPort("::1", 5) == "[::1]:5");
  CHECK(meshrun::HostPort("h", 5) == "h:5");
}

TEST_CASE("bad endpoints are refused with the value named", "[common]") {
  auto v6 = ParseEndpoint("fe80::1:29400", 29400);
  REQUIRE_FALSE(v6.ok());
  CHECK(std::string(v6.status().message()).find("ambiguous") != std::string::npos);
  CHECK(std::string(v6.status().message()).find("fe80::1:29400") != std::string::npos);
  CHECK_FALSE(ParseEndpoint("", 1).ok());
  CHECK_FALSE(ParseEndpoint("host:", 1).ok());
  CHECK_FALSE(ParseEndpoint("host:70000", 1).ok());
  CHECK_FALSE(ParseEndpoint("host:abc", 1).ok());
  CHECK_FALSE(ParseEndpoint(":29400", 1).ok());
  CHECK_FALSE(ParseEndpoint("[::1", 1).ok());
  // Found by fuzzing: a host with brackets or other stray characters, which
  // printed back ("[f:29400") as an endpoint that does not parse.
  CHECK_FALSE(ParseEndpoint("[[f]", 1).ok());
  CHECK_FALSE(ParseEndpoint("a]:5", 1).ok());
  CHECK_FALSE(ParseEndpoint("host name:5", 1).ok());
  CHECK_FALSE(ParseEndpoint("[fl%]", 1).ok());  // Brackets hold IPv6 addresses only.
  CHECK(ParseEndpoint("[fe80::1%eth0]:5", 1).ok());
  CHECK(ParseEndpoint("node_1.example-2.org:5", 1).ok());
}
