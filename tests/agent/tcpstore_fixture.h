// The agent store's test fixture: a real rendezvous server's store behind
// an AgentStore, and a raw TCPStore client over a real socket (the tests
// speak the protocol byte by byte, as PyTorch's client does).
#pragma once

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "agent/tcpstore/protocol.h"
#include "agent/tcpstore/tcpstore_server.h"
#include "client/grpc_store.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "rendezvous/server.h"

namespace meshrun::testing::tcpstore {

using namespace meshrun::agent::tcpstore;


inline Request Make(Op op, std::vector<std::string> keys = {}, std::vector<std::string> values = {}, int64_t number = 0) {
  Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  return r;
}

inline std::string Validate() {
  Request v;
  v.op = Op::kValidate;
  v.nonce = kValidationMagic;
  return EncodeRequest(v, Dialect::kCurrent);
}

// A raw TCPStore client connection to 127.0.0.1:port.
class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~Client() { ::close(fd_); }
  void Send(const std::string& bytes) { REQUIRE(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size())); }
  // Reads exactly n bytes within `seconds`; what arrived when it could not.
  std::string Read(size_t n, double seconds = 10) {
    std::string out;
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (out.size() < n) {
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count());
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, left) <= 0) break;
      char buf[4096];
      ssize_t got = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0) break;
      out.append(buf, static_cast<size_t>(got));
    }
    return out;
  }
  // True once the server closed the connection (within `seconds`).
  bool Closed(double seconds = 10) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(seconds * 1000)) <= 0) return false;
    char b;
    return ::recv(fd_, &b, 1, 0) == 0;
  }
  std::string Value(size_t max = 1 << 20) {
    std::string len = Read(8);
    REQUIRE(len.size() == 8);
    uint64_t n = 0;
    std::memcpy(&n, len.data(), 8);
    REQUIRE(n <= max);
    return Read(n);
  }
  int64_t I64() {
    std::string b = Read(8);
    REQUIRE(b.size() == 8);
    int64_t v = 0;
    std::memcpy(&v, b.data(), 8);
    return v;
  }

 private:
  int fd_ = -1;
};

struct Fixture {
  Fixture(AgentStoreOptions o = {}) {
    rendezvous::ServerOptions so;
    so.host = "127.0.0.1";
    so.port = 0;
    auto s = rendezvous::RendezvousServer::Start(so);
    REQUIRE(s.ok());
    server = std::move(*s);
    client::GrpcStoreOptions go;
    go.endpoint = server->endpoint();
    go.run_id = "tcpstore";
    go.connect_timeout = absl::Seconds(5);
    auto st = client::ConnectGrpcStore(go);
    REQUIRE(st.ok());
    store = *st;
    o.bind_addr = "127.0.0.1";
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> l(mu);
      logs += line + "\n";
    };
    auto a = AgentStore::Start(std::move(o));
    REQUIRE(a.ok());
    agent = std::move(*a);
    agent->SetStore(store, std::make_shared<PrefixStore>("internal", store));
  }
  std::string Logs() {
    std::lock_guard<std::mutex> l(mu);
    return logs;
  }
  std::unique_ptr<rendezvous::RendezvousServer> server;
  std::shared_ptr<Store> store;
  std::mutex mu;
  std::string logs;
  std::unique_ptr<AgentStore> agent;  // Last: goes first.
};

// Store calls the rendezvous server has served (its Kv* request counters),
// counted from outside the agent store.
inline int64_t StoreCalls(const Fixture& f) {
  auto admin = meshrun::v1::Admin::NewStub(grpc::CreateChannel(f.server->endpoint(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  meshrun::v1::StatusRequest req;
  meshrun::v1::StatusResponse resp;
  REQUIRE(admin->Status(&ctx, req, &resp).ok());
  int64_t n = 0;
  for (const auto& [method, count] : resp.request_counts()) {
    if (method.rfind("Kv", 0) == 0) n += count;
  }
  return n;
}

}  // namespace meshrun::testing::tcpstore
