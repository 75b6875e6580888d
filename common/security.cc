#include "common/security.h"

#include "common/endpoint.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <cstdio>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/env_registry.h"

namespace meshrun {
namespace {

absl::StatusOr<std::string> ReadWhole(const std::string& path, absl::string_view what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::InvalidArgumentError(absl::StrCat(what, "=", path, ": cannot read (", std::strerror(errno), ")"));
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using CtxPtr = std::unique_ptr<SSL_CTX, Deleter<SSL_CTX, SSL_CTX_free>>;
using SslPtr = std::unique_ptr<SSL, Deleter<SSL, SSL_free>>;

BioPtr MemBio(const std::string& pem) { return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))); }

std::string AsnTime(const ASN1_TIME* t) {
  BioPtr b(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(b.get(), t);
  char* data = nullptr;
  long n = BIO_get_mem_data(b.get(), &data);
  return std::string(data, n);
}

// The certificates of a PEM string (at least one, else an error).
absl::StatusOr<std::vector<X509Ptr>> ParseCerts(const std::string& pem, absl::string_view what,
                                                const std::string& path) {
  std::vector<X509Ptr> out;
  BioPtr bio = MemBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.emplace_back(x);
  ERR_clear_error();
  if (out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", path, ": not a PEM certificate (no '-----BEGIN CERTIFICATE-----' block)"));
  }
  return out;
}

std::string LastSslError() {
  unsigned long e = ERR_peek_last_error();
  if (e == 0) return "";
  const char* r = ERR_reason_error_string(e);
  return r ? r : absl::StrCat("OpenSSL error ", e);
}

bool IsNumericHost(const std::string& host) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

// A TCP connection to addr:port within `timeout`, or -1.
int ConnectTcp(const std::string& addr, int port, absl::Duration timeout) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  std::string a = addr;
  if (a.size() > 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, a.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, a.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof(*v6);
  } else {
    return -1;
  }
  int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    if (errno != EINPROGRESS) {
      ::close(fd);
      return -1;
    }
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t elen = sizeof(err);
    if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1 ||
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) {
      ::close(fd);
      return -1;
    }
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

void SetIoTimeout(int fd, absl::Duration d) {
  timeval tv = absl::ToTimeval(d);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// What the server's refusal after the handshake (`how`: its alert, or that
// it closed the connection) means for this node's certificate.
std::string ClientCertRefused(const TlsMaterial& tls, const std::string& how) {
  if (tls.cert_pem.empty()) {
    return absl::StrCat("the server requires a client certificate (mutual TLS; ", how,
                        "): set MESHRUN_TLS_CERT and MESHRUN_TLS_KEY");
  }
  return absl::StrCat("the server refused this node's certificate MESHRUN_TLS_CERT=", tls.files.cert, " (", how,
                      "): is it signed by the CA the server trusts (its MESHRUN_TLS_CA)?");
}

// Blocks SIGPIPE on this thread while it lives (the probe may write to a
// connection the server has closed), discarding one it raised.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &s, &old_);
    sigset_t p;
    sigpending(&p);
    pending_before_ = sigismember(&p, SIGPIPE) == 1;
  }
  ~SigpipeGuard() {
    if (!pending_before_) {
      sigset_t p;
      sigpending(&p);
      if (sigismember(&p, SIGPIPE) == 1) {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGPIPE);
        timespec zero{0, 0};
        sigtimedwait(&s, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
  bool pending_before_ = false;
};

bool IsAlert(const std::string& reason) { return absl::StrContains(reason, "alert"); }

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("token file ", path, ": cannot read (", std::strerror(errno), ")"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": not a regular file"));
  }
  const unsigned mode = st.st_mode & 07777;
  if ((mode & 077) != 0) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "%04o", mode);
    return absl::PermissionDeniedError(absl::StrCat("token file ", path, " has mode ", buf,
                                                    ": group or others may access it; allowed: 0600 or stricter "
                                                    "(chmod 600 ",
                                                    path, ")"));
  }
  absl::StatusOr<std::string> content = ReadWhole(path, "token file");
  if (!content.ok()) return content.status();
  std::string t = std::move(*content);
  if (absl::EndsWith(t, "\r\n")) {
    t.resize(t.size() - 2);
  } else if (absl::EndsWith(t, "\n")) {
    t.resize(t.size() - 1);
  }
  if (t.empty()) return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  return t;
}

absl::StatusOr<Token> ResolveToken(const std::string& file) {
  std::optional<std::string> env_file = env::Get(env::kTokenFile);
  std::optional<std::string> env_token = env::Get(env::kToken);
  std::string path = file;
  if (path.empty()) {
    if (env_file && env_token) {
      return absl::InvalidArgumentError(absl::StrCat("both MESHRUN_TOKEN and MESHRUN_TOKEN_FILE=", *env_file,
                                                     " are set: set only one"));
    }
    if (env_file) path = *env_file;
  }
  Token t;
  if (!path.empty()) {
    absl::StatusOr<std::string> v = ReadTokenFile(path);
    if (!v.ok()) return v.status();
    t.value = std::move(*v);
    t.file = path;
  } else if (env_token) {
    t.value = *env_token;
  }
  return t;
}

absl::StatusOr<ClientAuth> LoadClientAuth(const std::string& token_file, const TlsFiles& tls_files) {
  ClientAuth auth;
  absl::StatusOr<Token> token = ResolveToken(token_file);
  if (!token.ok()) return token.status();
  auth.token = std::move(token->value);
  absl::StatusOr<TlsMaterial> tls = LoadTls(TlsFilesFromEnv(tls_files));
  if (!tls.ok()) return tls.status();
  auth.tls = std::move(*tls);
  return auth;
}

absl::Status CheckServerTls(const TlsMaterial& tls) {
  if (!tls.client_tls() || tls.server_tls()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "a TLS CA (MESHRUN_TLS_CA, --tls_ca or rdzv_conf tls_ca) is set without a certificate and key: a server that "
      "speaks TLS needs its own (MESHRUN_TLS_CERT and MESHRUN_TLS_KEY, --tls_cert and --tls_key, or rdzv_conf "
      "tls_cert and tls_key)");
}

bool TokenEquals(absl::string_view a, absl::string_view b) {
  unsigned char da[EVP_MAX_MD_SIZE], db[EVP_MAX_MD_SIZE];
  unsigned int la = 0, lb = 0;
  if (EVP_Digest(a.data(), a.size(), da, &la, EVP_sha256(), nullptr) != 1 ||
      EVP_Digest(b.data(), b.size(), db, &lb, EVP_sha256(), nullptr) != 1 || la != lb) {
    return false;
  }
  return CRYPTO_memcmp(da, db, la) == 0;
}

TlsFiles TlsFilesFromEnv(TlsFiles files) {
  if (files.cert.empty()) files.cert = env::Get(env::kTlsCert).value_or("");
  if (files.key.empty()) files.key = env::Get(env::kTlsKey).value_or("");
  if (files.ca.empty()) files.ca = env::Get(env::kTlsCa).value_or("");
  return files;
}

absl::StatusOr<TlsMaterial> LoadTls(const TlsFiles& files) {
  TlsMaterial m;
  m.files = files;
  if (!files.any()) return m;
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        files.cert.empty()
            ? absl::StrCat("MESHRUN_TLS_KEY=", files.key, " is set without MESHRUN_TLS_CERT (tls_cert): set both or neither")
            : absl::StrCat("MESHRUN_TLS_CERT=", files.cert, " is set without MESHRUN_TLS_KEY (tls_key): set both or neither"));
  }
  if (!files.cert.empty()) {
    absl::StatusOr<std::string> cert = ReadWhole(files.cert, "MESHRUN_TLS_CERT");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadWhole(files.key, "MESHRUN_TLS_KEY");
    if (!key.ok()) return key.status();
    absl::StatusOr<std::vector<X509Ptr>> chain = ParseCerts(*cert, "MESHRUN_TLS_CERT", files.cert);
    if (!chain.ok()) return chain.status();
    X509* leaf = chain->front().get();
    BioPtr kb = MemBio(*key);
    KeyPtr pkey(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
    ERR_clear_error();
    if (!pkey) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MESHRUN_TLS_KEY=", files.key, ": not a PEM private key (or an encrypted one; meshrun needs it unencrypted)"));
    }
    if (X509_check_private_key(leaf, pkey.get()) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError(absl::StrCat("MESHRUN_TLS_KEY=", files.key,
                                                     " is not the key of the certificate MESHRUN_TLS_CERT=", files.cert));
    }
    if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0) {
      return absl::InvalidArgumentError(absl::StrCat("MESHRUN_TLS_CERT=", files.cert, ": the certificate expired on ",
                                                     AsnTime(X509_get0_notAfter(leaf)), "; renew it"));
    }
    if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
      return absl::InvalidArgumentError(absl::StrCat("MESHRUN_TLS_CERT=", files.cert,
                                                     ": the certificate is not valid before ",
                                                     AsnTime(X509_get0_notBefore(leaf))));
    }
    m.cert_pem = std::move(*cert);
    m.key_pem = std::move(*key);
  }
  if (!files.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadWhole(files.ca, "MESHRUN_TLS_CA");
    if (!ca.ok()) return ca.status();
    absl::StatusOr<std::vector<X509Ptr>> certs = ParseCerts(*ca, "MESHRUN_TLS_CA", files.ca);
    if (!certs.ok()) return certs.status();
    m.ca_pem = std::move(*ca);
  }
  return m;
}

std::string ProbeTlsMismatch(const std::string& host, const std::string& addr, int port, const TlsMaterial& tls,
                             absl::Duration timeout) {
  const std::string where = HostPort(host, port);
  SigpipeGuard no_sigpipe;
  int fd = ConnectTcp(addr, port, timeout);
  if (fd < 0) return "";
  SetIoTimeout(fd, timeout);
  CtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) {
    ::close(fd);
    return "";
  }
  if (tls.client_tls()) {
    BioPtr cb = MemBio(tls.ca_pem);
    X509_STORE* store = SSL_CTX_get_cert_store(ctx.get());
    while (X509* x = PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr)) {
      X509_STORE_add_cert(store, x);
      X509_free(x);
    }
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    if (!tls.cert_pem.empty()) {
      BioPtr b = MemBio(tls.cert_pem);
      X509Ptr leaf(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
      BioPtr kb = MemBio(tls.key_pem);
      KeyPtr key(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
      if (leaf && key) {
        SSL_CTX_use_certificate(ctx.get(), leaf.get());
        SSL_CTX_use_PrivateKey(ctx.get(), key.get());
        while (X509* x = PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr)) SSL_CTX_add0_chain_cert(ctx.get(), x);
      }
    }
  } else {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  }
  ERR_clear_error();
  SslPtr ssl(SSL_new(ctx.get()));
  SSL_set_fd(ssl.get(), fd);
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_set_alpn_protos(ssl.get(), kAlpn, sizeof(kAlpn));
  const bool numeric = IsNumericHost(host);
  if (!numeric) SSL_set_tlsext_host_name(ssl.get(), host.c_str());
  if (tls.client_tls()) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
    if (numeric) {
      X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
    }
  }
  std::string cause;
  if (SSL_connect(ssl.get()) != 1) {
    const long v = SSL_get_verify_result(ssl.get());
    const std::string reason = LastSslError();
    if (tls.client_tls() && v != X509_V_OK) {
      std::string hint;
      switch (v) {
        case X509_V_ERR_HOSTNAME_MISMATCH:
        case X509_V_ERR_IP_ADDRESS_MISMATCH:
          hint = absl::StrCat(": it is not for '", host, "' (its subjectAltName must name the host of the endpoint)");
          break;
        case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
        case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
        case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
        case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
        case X509_V_ERR_CERT_SIGNATURE_FAILURE:
          hint = absl::StrCat(": it is not signed by the CA in MESHRUN_TLS_CA=", tls.files.ca);
          break;
        case X509_V_ERR_CERT_HAS_EXPIRED:
          hint = ": the server must renew it";
          break;
        default:
          break;
      }
      cause = absl::StrCat("the server's certificate failed verification (", X509_verify_cert_error_string(v), ")",
                           hint);
    } else if (tls.client_tls() && IsAlert(reason)) {
      cause = ClientCertRefused(tls, absl::StrCat("its TLS alert: ", reason));
    } else if (tls.client_tls()) {
      // No TLS record came back: a plain gRPC server answers a ClientHello
      // with HTTP/2 bytes or closes the connection.
      cause = absl::StrCat("the server at ", where, " does not speak TLS (", reason.empty() ? "no TLS answer" : reason,
                           "): start it with MESHRUN_TLS_CERT and MESHRUN_TLS_KEY, or unset MESHRUN_TLS_CA here");
    }
  } else if (!tls.client_tls()) {
    cause = absl::StrCat("the server at ", where,
                         " speaks TLS and this node does not (set MESHRUN_TLS_CA; for mutual TLS also "
                         "MESHRUN_TLS_CERT and MESHRUN_TLS_KEY)");
  } else {
    // TLS 1.3: the server checks this node's certificate after the client's
    // Finished; its verdict (an alert, or HTTP/2 settings) follows.
    SetIoTimeout(fd, std::min(timeout, absl::Seconds(2)));
    char b;
    ERR_clear_error();
    const int n = SSL_read(ssl.get(), &b, 1);
    if (n <= 0) {
      const int err = SSL_get_error(ssl.get(), n);
      const int saved_errno = errno;
      const std::string reason = LastSslError();
      // gRPC's server closes the connection without an alert when it
      // refuses (or misses) the client's certificate; a server that accepts
      // it sends its HTTP/2 settings at once.
      const bool closed = err == SSL_ERROR_ZERO_RETURN || absl::StrContains(reason, "unexpected eof") ||
                          (err == SSL_ERROR_SYSCALL && saved_errno != EAGAIN && saved_errno != EWOULDBLOCK);
      if (IsAlert(reason)) {
        cause = ClientCertRefused(tls, absl::StrCat("its TLS alert: ", reason));
      } else if (closed) {
        cause = ClientCertRefused(tls, "it closed the connection right after the TLS handshake");
      }
    }
  }
  ERR_clear_error();
  ssl.reset();
  ::close(fd);
  return cause;
}

}  // namespace meshrun
