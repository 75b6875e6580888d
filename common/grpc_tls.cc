#include "common/grpc_tls.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

namespace meshrun {

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const TlsMaterial& tls) {
  if (!tls.client_tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = tls.ca_pem;
  o.pem_private_key = tls.key_pem;
  o.pem_cert_chain = tls.cert_pem;
  return grpc::SslCredentials(o);
}

void SetTlsTargetName(const TlsMaterial& tls, const std::string& host, grpc::ChannelArguments* args) {
  if (!tls.client_tls()) return;
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  args->SetSslTargetNameOverride(h);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsMaterial& tls) {
  if (!tls.server_tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(tls.mutual() ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                                   : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  o.pem_root_certs = tls.ca_pem;
  o.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  return grpc::SslServerCredentials(o);
}

}  // namespace meshrun
