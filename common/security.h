// The rendezvous' secrets and certificates, without gRPC: the token (from
// the environment or a file), its constant-time comparison, the TLS files
// (read and checked once, at start), and a probe that names why a TLS (or
// plain) connection to a server fails, using OpenSSL directly.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace meshrun {

// Reads a token file: refused (PERMISSION_DENIED naming the file and its
// mode) when group or others may read or write it (mode & 077), NOT_FOUND /
// INVALID_ARGUMENT when unreadable or empty. One trailing "\n" (or "\r\n")
// is stripped. The token itself never appears in an error.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// A token and where it came from.
struct Token {
  std::string value;  // Empty: no token.
  std::string file;   // The file it was read from; empty when from MESHRUN_TOKEN.
};

// The token of this process: `file` when non-empty (a flag or rdzv_conf
// token_file), else MESHRUN_TOKEN_FILE, else MESHRUN_TOKEN. INVALID_ARGUMENT
// when both MESHRUN_TOKEN and MESHRUN_TOKEN_FILE are set (which one is
// meant is unclear); errors of ReadTokenFile otherwise.
absl::StatusOr<Token> ResolveToken(const std::string& file);

// Constant-time equality whatever the lengths: compares the SHA-256 digests
// of both with CRYPTO_memcmp, so neither the content nor the length of the
// expected token leaks through timing.
bool TokenEquals(absl::string_view a, absl::string_view b);

// The TLS settings of a process (paths of PEM files; empty: not set).
// MESHRUN_TLS_CERT / _KEY / _CA, rdzv_conf tls_cert / tls_key / tls_ca,
// meshrun server --tls_cert / --tls_key / --tls_ca.
struct TlsFiles {
  std::string cert;  // This process's certificate (chain), PEM.
  std::string key;   // Its private key, PEM.
  std::string ca;    // The CA peers are verified against, PEM.
  bool any() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// Overrides unset fields of `files` from MESHRUN_TLS_CERT/KEY/CA.
TlsFiles TlsFilesFromEnv(TlsFiles files = {});

// The TLS files read and checked. Empty PEM strings where a file is unset.
struct TlsMaterial {
  TlsFiles files;
  std::string cert_pem;
  std::string key_pem;
  std::string ca_pem;
  // Client side: TLS is used when a CA is set.
  bool client_tls() const { return !ca_pem.empty(); }
  // Server side: TLS is served when a certificate is set; mutual when a CA is.
  bool server_tls() const { return !cert_pem.empty(); }
  bool mutual() const { return server_tls() && !ca_pem.empty(); }
};

// Reads and checks the files: each must be readable and valid PEM (a
// certificate, a private key, at least one CA certificate); the key must
// match the certificate; the certificate must be valid now (not expired,
// not yet valid). A certificate needs its key and vice versa. Errors are
// INVALID_ARGUMENT, one line naming the variable, the file and the fault.
// An empty TlsFiles gives an empty TlsMaterial (plain gRPC).
absl::StatusOr<TlsMaterial> LoadTls(const TlsFiles& files);

// Who a client of the rendezvous server is: the token it sends and the TLS
// it speaks. Every client (the agent, `meshrun status`, a worker dialing the
// server by hand) resolves it with LoadClientAuth.
struct ClientAuth {
  std::string token;  // Sent in every request; empty: none.
  TlsMaterial tls;    // TLS when tls.client_tls().
};

// The token (ResolveToken(token_file): the flag's file, else
// MESHRUN_TOKEN_FILE, else MESHRUN_TOKEN) and the TLS files (`tls_files`
// from flags, unset ones from MESHRUN_TLS_CERT/KEY/CA), read and checked
// now so that a bad one fails at start. Errors of ResolveToken and LoadTls:
// one line naming the variable or file. Thread-safe.
absl::StatusOr<ClientAuth> LoadClientAuth(const std::string& token_file, const TlsFiles& tls_files);

// A server's TLS settings are whole: a CA alone (which asks clients for
// certificates) without the server's own certificate and key is refused,
// INVALID_ARGUMENT naming the settings. OK for plain, TLS and mutual TLS.
absl::Status CheckServerTls(const TlsMaterial& tls);

// Why a connection to a rendezvous server at `addr`:`port` fails, probed
// once with a TCP connect and a TLS handshake made with OpenSSL directly
// (each bounded by `timeout`). `host` is the name the user gave (checked
// against the server's certificate). `tls`: this client's settings (plain
// when !tls.client_tls()). Returns a phrase naming the cause ("the server's
// certificate failed verification: certificate has expired", "the server
// speaks TLS ... (set MESHRUN_TLS_CA)", ...) or an empty string when the
// probe found nothing wrong (the caller then keeps gRPC's own error).
std::string ProbeTlsMismatch(const std::string& host, const std::string& addr, int port, const TlsMaterial& tls,
                             absl::Duration timeout);

}  // namespace meshrun
