// Shared by the agreement tests (agreement_test.cc: through InitDeviceMesh;
// agreement_exchange_test.cc: AgreeAndExchange and the NCCL id exchange
// directly): a real in-process rendezvous server, members as threads, and
// the checks both files make.
#pragma once

#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "rendezvous/server.h"

namespace meshrun::agreement_test {

inline std::unique_ptr<rendezvous::RendezvousServer> StartServer() {
  rendezvous::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  auto s = rendezvous::RendezvousServer::Start(o);
  REQUIRE(s.ok());
  return std::move(*s);
}

// Runs `body(rank)` for every rank in `ranks` on its own thread; returns
// each rank's status.
inline std::map<int, absl::Status> OnThreads(const std::vector<int>& ranks,
                                      const std::function<absl::Status(int)>& body) {
  std::map<int, absl::Status> out;
  std::vector<absl::Status> results(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) threads.emplace_back([&, i] { results[i] = body(ranks[i]); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < ranks.size(); ++i) out[ranks[i]] = results[i];
  return out;
}

inline int64_t KvRequests(const std::map<std::string, int64_t>& counts) {
  int64_t n = 0;
  for (const auto& [method, count] : counts) {
    if (method.rfind("Kv", 0) == 0) n += count;
  }
  return n;
}

// The message after each member's own "rank R: ..." prefix: the same on
// every member, with `code` and containing `part`.
inline void CheckOneMessage(const std::map<int, absl::Status>& statuses, absl::StatusCode code,
                            const std::string& part) {
  const std::string first(statuses.begin()->second.message().substr(statuses.begin()->second.message().find(": ") + 2));
  for (const auto& [rank, s] : statuses) {
    INFO("rank " << rank << ": " << s.ToString());
    CHECK(s.code() == code);
    CHECK(s.message().find(part) != absl::string_view::npos);
    CHECK(s.message().substr(s.message().find(": ") + 2) == first);
  }
}

}  // namespace meshrun::agreement_test
