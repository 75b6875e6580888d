// The token file, the constant-time token comparison and the checks of the
// TLS files (certificates made here with the openssl CLI).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "common/security.h"
#include "tests/support/certs.h"

using meshrun::LoadTls;
using meshrun::ReadTokenFile;
using meshrun::TlsFiles;
using meshrun::TokenEquals;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/meshrun-sec-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string File(const std::string& name, const std::string& content, mode_t mode) const {
    std::string p = path + "/" + name;
    std::ofstream(p) << content;
    ::chmod(p.c_str(), mode);
    return p;
  }
};

}  // namespace

TEST_CASE("a token file: 0600, trailing newline stripped, 0644 and empty refused", "[security]") {
  TempDir d;
  auto good = ReadTokenFile(d.File("t", "s3cret\n", 0600));
  REQUIRE(good.ok());
  CHECK(*good == "s3cret");
  CHECK(*ReadTokenFile(d.File("crlf", "s3cret\r\n", 0400)) == "s3cret");
  CHECK(*ReadTokenFile(d.File("two", "s3cret\n\n", 0600)) == "s3cret\n");  // Only one newline goes.

  auto open = ReadTokenFile(d.File("open", "s3cret\n", 0644));
  REQUIRE_FALSE(open.ok());
  CHECK(absl::StrContains(open.status().message(), d.path + "/open has mode 0644"));
  CHECK(absl::StrContains(open.status().message(), "allowed: 0600 or stricter"));
  CHECK_FALSE(absl::StrContains(open.status().message(), "s3cret"));
  CHECK_FALSE(ReadTokenFile(d.File("grp", "x", 0620)).ok());

  auto empty = ReadTokenFile(d.File("empty", "\n", 0600));
  REQUIRE_FALSE(empty.ok());
  CHECK(absl::StrContains(empty.status().message(), "is empty"));
  auto missing = ReadTokenFile(d.path + "/none");
  REQUIRE_FALSE(missing.ok());
  CHECK(absl::StrContains(missing.status().message(), d.path + "/none: cannot read"));
}

TEST_CASE("tokens compare by digest, whatever their lengths", "[security]") {
  CHECK(TokenEquals("abc", "abc"));
  CHECK_FALSE(TokenEquals("abc", "abd"));
  CHECK_FALSE(TokenEquals("abc", "abcd"));
  CHECK_FALSE(TokenEquals("", "a"));
  CHECK(TokenEquals(std::string(10000, 'x'), std::string(10000, 'x')));
  CHECK_FALSE(TokenEquals(std::string(10000, 'x'), std::string(9999, 'x')));
}

TEST_CASE("TLS files are checked at start, each fault naming the file", "[security]") {
  meshrun::testing::TestCerts certs;
  REQUIRE(certs.ok());
  auto p = [&](const std::string& name) { return certs.Path(name); };

  auto none = LoadTls(TlsFiles{});
  REQUIRE(none.ok());
  CHECK_FALSE(none->client_tls());
  CHECK_FALSE(none->server_tls());

  auto full = LoadTls(TlsFiles{p("host.crt"), p("host.key"), p("ca.crt")});
  REQUIRE(full.ok());
  CHECK(full->client_tls());
  CHECK(full->mutual());
  auto server_only = LoadTls(TlsFiles{p("host.crt"), p("host.key"), ""});
  REQUIRE(server_only.ok());
  CHECK(server_only->server_tls());
  CHECK_FALSE(server_only->mutual());
  CHECK_FALSE(server_only->client_tls());

  auto message = [](const TlsFiles& f) { return std::string(LoadTls(f).status().message()); };
  CHECK(message(TlsFiles{p("host.crt"), "", ""}) ==
        "MESHRUN_TLS_CERT=" + p("host.crt") + " is set without MESHRUN_TLS_KEY (tls_key): set both or neither");
  CHECK(message(TlsFiles{"", "", p("nope.pem")}) ==
        "MESHRUN_TLS_CA=" + p("nope.pem") + ": cannot read (No such file or directory)");
  TempDir d;
  const std::string junk = d.File("junk.pem", "hello\n", 0644);
  CHECK(absl::StrContains(message(TlsFiles{"", "", junk}), "MESHRUN_TLS_CA=" + junk + ": not a PEM certificate"));
  CHECK(absl::StrContains(message(TlsFiles{junk, p("host.key"), ""}), "MESHRUN_TLS_CERT=" + junk + ": not a PEM certificate"));
  CHECK(absl::StrContains(message(TlsFiles{p("host.crt"), junk, ""}), "MESHRUN_TLS_KEY=" + junk + ": not a PEM private key"));
  CHECK(message(TlsFiles{p("host.crt"), p("spare.key"), ""}) ==
        "MESHRUN_TLS_KEY=" + p("spare.key") + " is not the key of the certificate MESHRUN_TLS_CERT=" + p("host.crt"));

  meshrun::testing::TestCerts old(-1);
  REQUIRE(old.ok());
  std::string expired = message(TlsFiles{old.Path("host.crt"), old.Path("host.key"), ""});
  CHECK(absl::StartsWith(expired, "MESHRUN_TLS_CERT=" + old.Path("host.crt") + ": the certificate expired on "));
}

TEST_CASE("the token comes from a flag's file, MESHRUN_TOKEN_FILE or MESHRUN_TOKEN, and both variables is an error",
          "[security]") {
  TempDir d;
  const std::string a = d.File("a", "from-a\n", 0600);
  const std::string b = d.File("b", "from-b\n", 0600);
  ::unsetenv("MESHRUN_TOKEN");
  ::unsetenv("MESHRUN_TOKEN_FILE");
  CHECK(meshrun::ResolveToken("")->value.empty());
  ::setenv("MESHRUN_TOKEN", "plain", 1);
  CHECK(meshrun::ResolveToken("")->value == "plain");
  CHECK(meshrun::ResolveToken("")->file.empty());
  CHECK(meshrun::ResolveToken(a)->value == "from-a");  // The flag's file wins.
  ::setenv("MESHRUN_TOKEN_FILE", b.c_str(), 1);
  auto both = meshrun::ResolveToken("");
  REQUIRE_FALSE(both.ok());
  CHECK(std::string(both.status().message()) == "both MESHRUN_TOKEN and MESHRUN_TOKEN_FILE=" + b + " are set: set only one");
  ::unsetenv("MESHRUN_TOKEN");
  auto t = meshrun::ResolveToken("");
  REQUIRE(t.ok());
  CHECK(t->value == "from-b");
  CHECK(t->file == b);
  ::unsetenv("MESHRUN_TOKEN_FILE");
}
