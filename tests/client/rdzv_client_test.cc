// The agent's rendezvous client against a real `meshrun server` process.
#include "client/rdzv_client.h"
#include "client/rdzv_client_internal.h"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "tests/e2e/e2e_util.h"
#include "tests/support/subprocess.h"

namespace meshrun::client {
namespace {

using testing::MeshrunBinary;
using testing::ReadFile;
using testing::StartCommand;
using testing::TempDir;
using testing::WaitCommand;

// A `meshrun server` on a free loopback port; stopped and reaped at the end.
struct ServerProc {
  pid_t pid = -1;
  int port = 0;
  ~ServerProc() {
    if (pid <= 0) return;
    kill(pid, SIGCONT);
    kill(pid, SIGTERM);
    WaitCommand(pid, 10);
  }
};

void StartServer(ServerProc* s) {
  const std::string dir = TempDir();
  s->pid = StartCommand({MeshrunBinary(), "server", "--host", "127.0.0.1", "--port", "0", "--port_file", dir + "/port"},
                        {}, dir + "/out", dir + "/err");
  for (int i = 0; i < 200 && s->port == 0; ++i) {
    std::string text = ReadFile(dir + "/port");
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &s->port)) absl::SleepFor(absl::Milliseconds(50));
  }
  REQUIRE(s->port > 0);
}

}  // namespace

TEST_CASE("a server that stops answering is lost after the silence limit, refusals being answers",
          "[agent][rdzv_client]") {
  ServerProc server;
  StartServer(&server);
  auto c = RendezvousClient::Connect(absl::StrCat("127.0.0.1:", server.port), "silent", {}, absl::Seconds(10));
  REQUIRE(c.ok());
  absl::Notification closed;
  absl::Status closed_status;
  (*c)->StartWatch("n0", -1, [](const rendezvous::RunEvent&) {}, [&](const absl::Status& s) {
    closed_status = s;
    closed.Notify();
  });
  rendezvous::NodeDesc node;
  node.node_id = "n0";
  node.hostname = "n0";
  node.master_port = 29500;
  rendezvous::RunConfig config;
  config.keep_alive_interval = absl::Milliseconds(200);
  config.keep_alive_max_attempt = 2;  // The limit: 0.4 s without an answer.
  // The answer comes on a client thread: kept there, checked here (Catch2's
  // assertions are for the test's own thread).
  absl::Notification joined;
  absl::Status join_status = absl::UnknownError("no answer");
  (*c)->JoinAsync(node, config, -1, absl::Seconds(10), [&](absl::StatusOr<rendezvous::Assignment> a) {
    join_status = a.status();
    joined.Notify();
  });
  REQUIRE(joined.WaitForNotificationWithTimeout(absl::Seconds(10)));
  REQUIRE(join_status.ok());

  // Refusals (an unknown node) are answers: the server is there. (n0's own
  // heartbeats keep it a member meanwhile.)
  for (int i = 0; i < 4; ++i) {
    CHECK(absl::IsPermissionDenied((*c)->Heartbeat("nobody", 0, absl::Milliseconds(500)).status()));
    CHECK((*c)->Heartbeat("n0", 0, absl::Milliseconds(500)).ok());
    absl::SleepFor(absl::Milliseconds(100));
  }
  CHECK_FALSE(closed.HasBeenNotified());

  // Stopped: its connection stays open and nothing answers.
  REQUIRE(kill(server.pid, SIGSTOP) == 0);
  // kill() returns before every thread of the server has stopped; a call
  // sent meanwhile may still be answered. Wait until the kernel says it is
  // stopped ('T' in /proc/<pid>/stat), at most 2 s.
  auto state = [&] {
    std::ifstream f("/proc/" + std::to_string(server.pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t p = stat.rfind(')');
    return p == std::string::npos || p + 2 >= stat.size() ? '?' : stat[p + 2];
  };
  for (int i = 0; i < 200 && state() != 'T'; ++i) absl::SleepFor(absl::Milliseconds(10));
  REQUIRE(state() == 'T');
  absl::SleepFor(absl::Milliseconds(50));  // Calls answered just before the stop have arrived.
  const absl::Time stopped = absl::Now();
  for (int i = 0; i < 60 && !closed.HasBeenNotified(); ++i) {
    CHECK_FALSE((*c)->Heartbeat("n0", 0, absl::Milliseconds(300)).ok());
    absl::SleepFor(absl::Milliseconds(100));
  }
  REQUIRE(closed.WaitForNotificationWithTimeout(absl::Seconds(2)));
  const absl::Duration took = absl::Now() - stopped;
  INFO(closed_status.ToString());
  CHECK(absl::IsUnavailable(closed_status));
  CHECK(absl::StrContains(closed_status.message(),
                          absl::StrCat("lost the rendezvous server at 127.0.0.1:", server.port, ": no answer for ")));
  CHECK(absl::StrContains(closed_status.message(), "unanswered; limit 2.2s"));
  // The run's limit is 0.4 s, but a heartbeat gets at least 2 s to be
  // answered: 0.2 s + 2 s; long before HTTP/2 keepalive (30 s + 20 s) would.
  CHECK(took >= absl::Milliseconds(2000));
  if (testing::kTimingBounds) CHECK(took < absl::Seconds(5));
  kill(server.pid, SIGCONT);
}

}  // namespace meshrun::client

TEST_CASE("the server silence limit: the run's rule or server_silence_timeout, at least a heartbeat's chance",
          "[agent][rdzv_client]") {
  using absl::Seconds;
  CHECK(meshrun::client::ServerSilenceLimit(Seconds(5), 3, Seconds(8)) == Seconds(8));   // The defaults: 8 s, not 15 s.
  CHECK(meshrun::client::ServerSilenceLimit(Seconds(1), 3, Seconds(8)) == Seconds(3));   // The run's own 1 s x 3.
  CHECK(meshrun::client::ServerSilenceLimit(Seconds(10), 3, Seconds(8)) == Seconds(12)); // A heartbeat every 10 s gets 2 s.
  CHECK(meshrun::client::ServerSilenceLimit(Seconds(5), 3, Seconds(60)) == Seconds(15));
}

TEST_CASE("a lost server is described from the connection's error, a replica's own words are kept", "[client]") {
  using meshrun::client::DescribeLoss;
  CHECK(DescribeLoss(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                  "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
                                  "Failed to connect to remote host: Connection refused")) ==
        "connection refused (the server is not running)");
  // A replica that stops serving quotes etcd's errors: not this connection's.
  const std::string own = "the run's state could not be saved (etcd 127.0.0.1:2379: Connection refused); this "
                          "server replica stops serving until its state is loaded again";
  CHECK(DescribeLoss(grpc::Status(grpc::StatusCode::UNAVAILABLE, own)) == own);
}

namespace meshrun::client {
namespace {

// Answers every Heartbeat with one status, as a replica would (or as gRPC
// does for a call that reaches a server shutting down: CANCELLED).
class FixedHeartbeat final : public v1::Rendezvous::CallbackService {
 public:
  explicit FixedHeartbeat(grpc::StatusCode code) : code_(code) {}
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const v1::HeartbeatRequest*,
                                      v1::HeartbeatResponse*) override {
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status(code_, "fixed"));
    return r;
  }

 private:
  const grpc::StatusCode code_;
};

}  // namespace

TEST_CASE("a replica probe takes a call cancelled by the server (one shutting down) for no answer", "[client]") {
  // In a loaded suite, an agent looking for the next leader after the leader's SIGTERM probed
  // that replica while gRPC cancelled its new calls, took CANCELLED for an answer, and
  // followed the replica that was going away.
  for (const auto& [code, want] : std::vector<std::pair<grpc::StatusCode, Probed>>{
           {grpc::StatusCode::CANCELLED, Probed::kUnreachable},
           {grpc::StatusCode::UNKNOWN, Probed::kUnreachable},
           {grpc::StatusCode::INTERNAL, Probed::kUnreachable},
           {grpc::StatusCode::UNAVAILABLE, Probed::kUnreachable},
           {grpc::StatusCode::OK, Probed::kServes},
           {grpc::StatusCode::NOT_FOUND, Probed::kServes},  // A leader's refusal is an answer.
           {grpc::StatusCode::FAILED_PRECONDITION, Probed::kServes}}) {
    FixedHeartbeat service(code);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service);
    std::unique_ptr<grpc::Server> server = b.BuildAndStart();
    REQUIRE(server != nullptr);
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
    std::string hint, why;
    INFO("status code " << static_cast<int>(code));
    CHECK(Probe(channel, "job", "", "node", "", &hint, &why) == want);
    server->Shutdown();
  }
}

}  // namespace meshrun::client
