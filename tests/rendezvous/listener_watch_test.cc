// The listener watch: when a stopped listener is noticed, warned about and
// rebuilt (pure decisions), gRPC's log line that gives it away, and the
// kernel's view of a listening socket's queue (real sockets).
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "rendezvous/listen_socket.h"
#include "rendezvous/listener_watch.h"

using namespace meshrun::rendezvous;
using Catch::Contains;

namespace {

using Obs = ListenerHealth::Observation;

Obs Exhausted() {
  Obs o;
  o.accept_failures = 1;
  o.failure = "Too many open files";
  o.queue = 3;
  o.open_fds = 256;
  o.fd_limit = 256;
  o.free_fds = 0;
  return o;
}

Obs Freed() {
  Obs o;
  o.queue = 5;
  o.open_fds = 12;
  o.fd_limit = 256;
  o.free_fds = ListenerHealth::kHeadroom;
  return o;
}

}  // namespace

TEST_CASE("a failed accept starts one episode: one warning, a rebuild once descriptors are free", "[listener]") {
  ListenerHealth h(29400);
  absl::Time t = absl::FromUnixSeconds(1000);
  CHECK(h.Check(Obs{}, t).warning.empty());
  ListenerHealth::Decision d = h.Check(Exhausted(), t += absl::Seconds(1));
  CHECK(h.stopped());
  CHECK_THAT(d.warning, Contains("port 29400 stopped accepting new connections (Too many open files; 256 of 256 file "
                                 "descriptors open)"));
  CHECK_THAT(d.warning, Contains("goes on serving the connections it has"));
  CHECK_FALSE(d.rebuild);  // Nothing free yet.
  // Still exhausted: no second warning, no rebuild.
  for (int i = 0; i < 5; ++i) {
    d = h.Check(Exhausted(), t += absl::Seconds(1));
    CHECK(d.warning.empty());
    CHECK(d.info.empty());
    CHECK_FALSE(d.rebuild);
  }
  // Free: rebuild now; success ends the episode.
  d = h.Check(Freed(), t += absl::Seconds(1));
  CHECK(d.rebuild);
  d = h.Rebuilt(absl::OkStatus(), t);
  CHECK_FALSE(h.stopped());
  CHECK_THAT(d.info, Contains("accepting new connections on port 29400 again, 6s after it stopped"));
  Obs calm;
  calm.queue = 0;
  CHECK_FALSE(h.Check(calm, t += absl::Seconds(1)).rebuild);
}

TEST_CASE("a failed accept while this listener's queue is empty was another server's", "[listener]") {
  ListenerHealth h(1);
  Obs other = Exhausted();
  other.queue = 0;
  ListenerHealth::Decision d = h.Check(other, absl::FromUnixSeconds(1000));
  CHECK_FALSE(h.stopped());
  CHECK(d.warning.empty());
  CHECK_FALSE(d.rebuild);
  other.queue = -1;  // Unknown: taken as this listener's.
  CHECK_FALSE(h.Check(other, absl::FromUnixSeconds(1001)).warning.empty());
  CHECK(h.stopped());
}

TEST_CASE("a failed rebuild is warned about once and retried at every check", "[listener]") {
  ListenerHealth h(1);
  absl::Time t = absl::FromUnixSeconds(1000);
  h.Check(Exhausted(), t);
  REQUIRE(h.Check(Freed(), t += absl::Seconds(1)).rebuild);
  ListenerHealth::Decision d = h.Rebuilt(absl::AlreadyExistsError("port 1 is in use by another socket"), t);
  CHECK_THAT(d.warning, Contains("could not rebuild the listener on port 1: port 1 is in use"));
  CHECK(h.stopped());
  REQUIRE(h.Check(Freed(), t += absl::Seconds(1)).rebuild);
  CHECK(h.Rebuilt(absl::AlreadyExistsError("again"), t).warning.empty());
  REQUIRE(h.Check(Freed(), t += absl::Seconds(1)).rebuild);
  CHECK_FALSE(h.Rebuilt(absl::OkStatus(), t).info.empty());
}

TEST_CASE("episodes in quick succession: warnings at most once a minute, rebuilds backed off", "[listener]") {
  ListenerHealth h(1);
  absl::Time t = absl::FromUnixSeconds(1000);
  CHECK_FALSE(h.Check(Exhausted(), t).warning.empty());
  REQUIRE(h.Check(Freed(), t += absl::Seconds(1)).rebuild);
  h.Rebuilt(absl::OkStatus(), t);
  // Exhausted again 2 s later: said at info, and the rebuild waits 1 s.
  ListenerHealth::Decision d = h.Check(Exhausted(), t += absl::Seconds(2));
  CHECK(d.warning.empty());
  CHECK_THAT(d.info, Contains("stopped accepting"));
  REQUIRE(h.Check(Freed(), t += absl::Milliseconds(100)).rebuild);  // No gap yet.
  h.Rebuilt(absl::OkStatus(), t);  // Within 10 s of the last: the next waits 1 s.
  h.Check(Exhausted(), t += absl::Milliseconds(200));
  CHECK_FALSE(h.Check(Freed(), t += absl::Milliseconds(500)).rebuild);
  CHECK(h.Check(Freed(), t += absl::Seconds(1)).rebuild);
  h.Rebuilt(absl::OkStatus(), t);
  // A minute on, a new episode warns again.
  CHECK_FALSE(h.Check(Exhausted(), t += absl::Minutes(2)).warning.empty());
}

TEST_CASE("a queue that never moves counts as a stopped listener, a busy one does not", "[listener]") {
  ListenerHealth busy(1);
  absl::Time t = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 20; ++i) {
    Obs o;
    o.queue = i % 3 == 2 ? 1 : 4;  // Drains now and then.
    CHECK_FALSE(busy.Check(o, t += absl::Seconds(1)).rebuild);
  }
  CHECK_FALSE(busy.stopped());
  ListenerHealth stuck(1);
  ListenerHealth::Decision d;
  for (int i = 0; i < ListenerHealth::kStuckChecks; ++i) {
    Obs o;
    o.queue = 7 + i;
    d = stuck.Check(o, t += absl::Seconds(1));
  }
  CHECK(stuck.stopped());
  CHECK_THAT(d.warning, Contains("11 connection(s) waited in its accept queue for 5 checks"));
  CHECK(d.rebuild);  // Descriptors not probed: try.
}

TEST_CASE("gRPC's failed-accept line counts when the reason is a want of resources", "[listener]") {
  CHECK(ListenerWatch::IsResourceFailure("Failed accept4: Too many open files"));
  CHECK(ListenerWatch::IsResourceFailure("Failed accept4: Too many open files in system"));
  CHECK(ListenerWatch::IsResourceFailure("Failed accept4: No buffer space available"));
  CHECK(ListenerWatch::IsResourceFailure("Failed accept4: Cannot allocate memory"));
  // Our own shutdown of a stopped listener, and other lines, do not.
  CHECK_FALSE(ListenerWatch::IsResourceFailure("Failed accept4: Invalid argument"));
  CHECK_FALSE(ListenerWatch::IsResourceFailure("Too many open files"));
  CHECK_FALSE(ListenerWatch::IsResourceFailure("bind: Address already in use"));
}

TEST_CASE("the kernel's view of a listening socket: found by port, its queue, stopped", "[listener]") {
  int lfd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(lfd >= 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;  // Dual stack, as gRPC binds.
  REQUIRE(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(listen(lfd, 16) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const int port = ntohs(a.sin6_port);
  CHECK(ListeningSockets(port) == std::vector<int>{lfd});
  CHECK(IsListeningOn(lfd, port));
  CHECK_FALSE(IsListeningOn(lfd, port + 1));
  CHECK(AcceptQueueLength(lfd) == 0);
  // Three connections nobody accepts wait in the queue.
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) {
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(static_cast<uint16_t>(port));
    REQUIRE(connect(c, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0);
    clients.push_back(c);
  }
  CHECK(AcceptQueueLength(lfd) == 3);
  StopListening(lfd);
  CHECK_FALSE(IsListeningOn(lfd, port));
  CHECK(AcceptQueueLength(lfd) == -1);
  CHECK(ListeningSockets(port).empty());
  // The port can be bound again (with SO_REUSEADDR) while the old
  // descriptor is still open.
  int again = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  setsockopt(again, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  CHECK(bind(again, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  CHECK(listen(again, 16) == 0);
  CHECK(ListeningSockets(port) == std::vector<int>{again});
  for (int c : clients) close(c);
  close(again);
  close(lfd);
}
