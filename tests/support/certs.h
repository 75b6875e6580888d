// Test certificates made with the openssl CLI: a CA, a certificate for
// localhost / 127.0.0.1 signed by it (serverAuth and clientAuth), a second
// CA and a certificate signed by that one.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace meshrun::testing {

class TestCerts {
 public:
  // Makes the files in a fresh temporary folder; `days`: validity of the
  // localhost certificate (negative: already expired). ok() tells whether
  // openssl succeeded.
  explicit TestCerts(int days = 2) {
    char tmpl[] = "/tmp/meshrun-certs-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string ext =
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > host.ext";
    ok_ = Sh("openssl req -x509 " + ec + " -keyout ca.key -out ca.crt -days 2 -subj /CN=ca") &&
          Sh("openssl req -x509 " + ec + " -keyout otherca.key -out otherca.crt -days 2 -subj /CN=otherca") &&
          Sh(ext) && Sh("openssl req " + ec + " -keyout host.key -out host.csr -subj /CN=host") &&
          Sh("openssl x509 -req -in host.csr -CA ca.crt -CAkey ca.key -CAcreateserial -extfile host.ext -days " +
             std::to_string(days) + " -out host.crt") &&
          Sh("openssl req " + ec + " -keyout other.key -out other.csr -subj /CN=other") &&
          Sh("openssl x509 -req -in other.csr -CA otherca.crt -CAkey otherca.key -CAcreateserial -extfile host.ext "
             "-days 2 -out other.crt") &&
          Sh("openssl req " + ec + " -keyout spare.key -out spare.csr -subj /CN=spare");
  }
  ~TestCerts() { std::filesystem::remove_all(dir_); }
  bool ok() const { return ok_; }
  // The path of a file made here: ca.crt, host.crt, host.key, otherca.crt,
  // other.crt, other.key, spare.key (a key of no certificate).
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& dir() const { return dir_; }

 private:
  bool Sh(const std::string& cmd) const {
    return std::system(("cd " + dir_ + " && (" + cmd + ") >/dev/null 2>&1").c_str()) == 0;
  }
  std::string dir_;
  bool ok_ = false;
};

}  // namespace meshrun::testing
