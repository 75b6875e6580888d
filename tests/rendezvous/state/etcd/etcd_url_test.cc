// The --state URL, the etcd connection's flags, and the pure helpers of
// rendezvous/state/etcd (no etcd needed).
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "rendezvous/state/etcd/client/etcd_options.h"
#include "rendezvous/state/etcd/client/etcd_types.h"
#include "rendezvous/state/etcd/client/etcd_url.h"
#include "rendezvous/state/etcd/election.h"
#include "tests/support/certs.h"
#include "tests/support/subprocess.h"

namespace etcd = meshrun::rendezvous::state::etcd;

namespace {

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<etcd::Url> u = etcd::ParseUrl(text);
  if (u.ok()) return "";
  CHECK(u.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(u.status().message());
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("state URLs parse: members, ports, IPv6, TLS, prefix", "[etcd_url]") {
  absl::StatusOr<etcd::Url> a = etcd::ParseUrl("etcd://10.0.0.1:2379,10.0.0.2:2380,host3/meshrun");
  REQUIRE(a.ok());
  CHECK_FALSE(a->tls);
  REQUIRE(a->members.size() == 3);
  CHECK(a->members[0].host == "10.0.0.1");
  CHECK(a->members[1].port == 2380);
  CHECK(a->members[2].host == "host3");
  CHECK(a->members[2].port == etcd::kDefaultPort);
  CHECK(a->prefix == "/meshrun");
  CHECK(a->ToString() == "etcd://10.0.0.1:2379,10.0.0.2:2380,host3:2379/meshrun");
  CHECK(a->MembersString() == "10.0.0.1:2379,10.0.0.2:2380,host3:2379");

  absl::StatusOr<etcd::Url> b = etcd::ParseUrl("ETCDS://[fd00::1]:2379,[::1]");
  REQUIRE(b.ok());
  CHECK(b->tls);
  CHECK(b->members[0].host == "fd00::1");
  CHECK(b->members[1].port == 2379);
  CHECK(b->prefix == "/meshrun");
  CHECK(b->ToString() == "etcds://[fd00::1]:2379,[::1]:2379/meshrun");

  absl::StatusOr<etcd::Url> c = etcd::ParseUrl("etcd://h:1/jobs/team-a_1.x/");
  REQUIRE(c.ok());
  CHECK(c->prefix == "/jobs/team-a_1.x");
  // The canonical text parses back to the same URL.
  absl::StatusOr<etcd::Url> again = etcd::ParseUrl(c->ToString());
  REQUIRE(again.ok());
  CHECK(again->ToString() == c->ToString());
}

TEST_CASE("bad --state URLs get one line naming the value and the allowed form", "[etcd_url]") {
  struct Case {
    const char* text;
    const char* why;
  };
  const Case cases[] = {
      {"http://10.0.0.1:2379", "scheme 'http://' is not etcd:// or etcds://"},
      {"10.0.0.1:2379", "no scheme"},
      {"", "empty"},
      {"etcd://", "no member given"},
      {"etcd:///meshrun", "no member given"},
      {"etcd://:2379", "has an empty host"},
      {"etcd://h:99999", "port '99999' is not an integer in 1..65535"},
      {"etcd://h:0", "port '0' is not an integer in 1..65535"},
      {"etcd://h:abc", "port 'abc' is not an integer"},
      {"etcd://h:", "port '' is not an integer"},
      {"etcd://h:+1", "port '+1' is not an integer"},
      {"etcd://a:1,,b:2", "an empty member"},
      {"etcd://a:1,", "an empty member"},
      {"etcd://a:1,A:1", "member A:1 is given twice"},
      {"etcd://fd00::1:2379", "an IPv6 address needs brackets"},
      {"etcd://[fd00::1:2379", "lacks the ']'"},
      {"etcd://[host]:1", "brackets are for IPv6 addresses"},
      {"etcd://h$:1", "may only have letters, digits"},
      {"etcd://user:pw@h:1", "credentials ('user@') are not allowed"},
      {"etcd://h:1/x?a=b", "a query or fragment"},
      {"etcd://h:1/", "the prefix '/' is empty"},
      {"etcd://h:1/a//b", "empty, '.' or '..' segment"},
      {"etcd://h:1/a/../b", "empty, '.' or '..' segment"},
      {"etcd://h:1/a b", "may only have letters, digits"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const std::string m = ErrorOf(c.text);
    REQUIRE_FALSE(m.empty());
    CHECK(Has(m, c.why));
    CHECK(Has(m, std::string("invalid --state URL '") + c.text + "'"));
    CHECK(Has(m, "allowed: etcd://HOST:PORT[,HOST:PORT...][/PREFIX], or etcds:// for TLS"));
    CHECK_FALSE(Has(m, "\n"));
  }
  // A newline in the value stays escaped: still one line.
  const std::string nl = ErrorOf("etcd://h:1/a\nb");
  CHECK(Has(nl, "a\\nb"));
  CHECK_FALSE(Has(nl, "\n"));
  // Too many members, too long a prefix.
  std::string many = "etcd://";
  for (int i = 0; i < 33; ++i) many += (i ? ",h" : "h") + std::to_string(i);
  CHECK(Has(ErrorOf(many), "more than 32 members"));
  CHECK(Has(ErrorOf("etcd://h/" + std::string(300, 'a')), "more than 256"));
}

TEST_CASE("PrefixEnd makes the range of a prefix", "[etcd_url]") {
  CHECK(etcd::PrefixEnd("/meshrun/") == "/meshrun0");
  CHECK(etcd::PrefixEnd("a") == "b");
  CHECK(etcd::PrefixEnd(std::string("a\xff", 2)) == "b");
  CHECK(etcd::PrefixEnd(std::string("\xff\xff", 2)) == std::string(1, '\0'));
  CHECK(etcd::PrefixEnd("") == std::string(1, '\0'));
}

TEST_CASE("an election key's value carries the candidate id and value", "[etcd_url]") {
  std::string id, value;
  REQUIRE(etcd::DecodeCandidate(etcd::EncodeCandidate("replica-1", "10.0.0.1:29400\nx"), &id, &value).ok());
  CHECK(id == "replica-1");
  CHECK(value == "10.0.0.1:29400\nx");
  CHECK(etcd::DecodeCandidate("no newline", &id, &value).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the etcd connection's flags are checked at start, one line naming the flag", "[etcd_url]") {
  using etcd::ConnectionFlags;
  auto err = [](const ConnectionFlags& f) {
    absl::StatusOr<etcd::Connection> c = etcd::ResolveConnection(f);
    REQUIRE_FALSE(c.ok());
    const std::string m(c.status().message());
    CHECK_FALSE(Has(m, "\n"));
    CHECK_FALSE(Has(m, "MESHRUN_"));
    return m;
  };
  ConnectionFlags f;
  f.url = "etcd://127.0.0.1:1";
  absl::StatusOr<etcd::Connection> ok = etcd::ResolveConnection(f);
  REQUIRE(ok.ok());
  CHECK(ok->client.members.size() == 1);
  CHECK_FALSE(ok->client.use_tls);

  f.url = "etcds://127.0.0.1:1";
  CHECK(Has(err(f), "asks for TLS (etcds://): set --state_tls_ca"));

  meshrun::testing::TestCerts certs;
  REQUIRE(certs.ok());
  f.url = "etcd://127.0.0.1:1";
  f.tls.ca = certs.Path("ca.crt");
  CHECK(Has(err(f), "is plain (etcd://) but --state_tls_ca"));

  f.url = "etcds://127.0.0.1:1";
  f.tls.cert = certs.Path("host.crt");
  CHECK(Has(err(f), "--state_tls_cert=" + certs.Path("host.crt") + " is set without --state_tls_key"));
  f.tls.key = certs.Path("other.key");
  CHECK(Has(err(f), "--state_tls_key=" + certs.Path("other.key") + " is not the key of the certificate"));
  f.tls.key = certs.Path("host.key");
  absl::StatusOr<etcd::Connection> tls = etcd::ResolveConnection(f);
  REQUIRE(tls.ok());
  CHECK(tls->client.use_tls);
  CHECK_FALSE(tls->client.tls.ca_pem.empty());

  ConnectionFlags a;
  a.url = "etcd://127.0.0.1:1";
  a.user = "meshrun";
  CHECK(Has(err(a), "--state_user=meshrun is set without --state_password_file"));
  const std::string dir = meshrun::testing::TempDir();
  const std::string pw = dir + "/pw";
  std::ofstream(pw) << "secret\n";
  ::chmod(pw.c_str(), 0644);
  a.password_file = pw;
  const std::string open = err(a);
  CHECK(Has(open, "--state_password_file " + pw + " has mode 0644"));
  ::chmod(pw.c_str(), 0600);
  absl::StatusOr<etcd::Connection> auth = etcd::ResolveConnection(a);
  REQUIRE(auth.ok());
  CHECK(auth->client.user == "meshrun");
  CHECK(auth->client.password == "secret");
  a.user.clear();
  CHECK(Has(err(a), "--state_password_file=" + pw + " is set without --state_user"));

  ConnectionFlags bad;
  bad.url = "http://x";
  CHECK(Has(err(bad), "invalid --state URL 'http://x'"));
}

TEST_CASE("the client refuses inconsistent options at Create", "[etcd_url]") {
  etcd::ClientOptions o;
  CHECK(etcd::Client::Create(o).status().code() == absl::StatusCode::kInvalidArgument);
  o.members.push_back(meshrun::Endpoint{"127.0.0.1", 1});
  o.use_tls = true;
  CHECK(Has(std::string(etcd::Client::Create(o).status().message()), "needs the CA"));
  o.use_tls = false;
  o.user = "u";
  CHECK(Has(std::string(etcd::Client::Create(o).status().message()), "is set without a password"));
  o.password = "p";
  o.call_timeout = absl::ZeroDuration();
  CHECK(Has(std::string(etcd::Client::Create(o).status().message()), "call_timeout=0 must be positive"));
  o.call_timeout = absl::Seconds(1);
  CHECK(etcd::Client::Create(o).ok());
}
