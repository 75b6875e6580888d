// gRPC's SSL credentials from a TlsMaterial (common/security.h), for every
// channel and server meshrun makes.
#pragma once

#include <memory>
#include <string>

#include "common/security.h"

namespace grpc {
class ChannelArguments;
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace meshrun {

// Client credentials: SSL verifying the server against tls.ca_pem and
// presenting cert/key when set, when tls.client_tls(); insecure otherwise.
std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const TlsMaterial& tls);

// When tls.client_tls(): the server's certificate is checked against
// `host` (the name the user gave) although the channel dials a numeric
// address. Nothing otherwise.
void SetTlsTargetName(const TlsMaterial& tls, const std::string& host, grpc::ChannelArguments* args);

// Server credentials: SSL with cert/key when tls.server_tls(), requiring and
// verifying client certificates against tls.ca_pem when tls.mutual();
// insecure otherwise.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsMaterial& tls);

}  // namespace meshrun
