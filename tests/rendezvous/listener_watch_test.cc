// The listener watch: when a stopped listener is noticed, warned about and
// rebuilt (pure decisions), gRPC's log line that gives it away, the
// kernel's view of a listening socket's queue (real sockets), and what its
// descriptor observers are told (pure, and under a real exhausted limit).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <vector>

#include "absl/time/clock.h"
#include "common/open_files.h"
#include "rendezvous/server/listen_socket.h"
#include "rendezvous/server/listener_watch.h"

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
  // Episode after episode: the wait doubles, but never past kMaxRebuildGap,
  // so new connections are accepted within 5 s of descriptors being free.
  for (int i = 0; i < 8; ++i) {
    h.Check(Exhausted(), t += absl::Milliseconds(100));
    absl::Time freed = t;
    int checks = 0;
    while (!h.Check(Freed(), t += absl::Seconds(1)).rebuild) REQUIRE(++checks < 10);
    CHECK(t - freed <= absl::Seconds(5));
    h.Rebuilt(absl::OkStatus(), t);
  }
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
  // A burst: the queue grows for longer than kStuckChecks, but the server
  // goes on accepting connections, so the listener works.
  ListenerHealth burst(1);
  for (int i = 0; i < 3 * ListenerHealth::kStuckChecks; ++i) {
    Obs o;
    o.queue = 100 + 50 * i;
    o.accepted = 1000 * i;
    CHECK_FALSE(burst.Check(o, t += absl::Seconds(1)).rebuild);
  }
  CHECK_FALSE(burst.stopped());
  // A server short of CPU: its count of connections (taken at their first
  // call) stands still, but it accepts (its descriptors grow): not stuck.
  for (int i = 0; i < 3 * ListenerHealth::kStuckChecks; ++i) {
    Obs o;
    o.queue = 900;
    o.accepted = 14000;
    o.open_fds = 10000 + i;
    CHECK_FALSE(burst.Check(o, t += absl::Seconds(1)).rebuild);
  }
  CHECK_FALSE(burst.stopped());
  // The same queue with both standing still: stopped (the first of these
  // checks still sees the descriptors grow).
  for (int i = 0; i <= ListenerHealth::kStuckChecks; ++i) {
    Obs o;
    o.queue = 900;
    o.accepted = 14000;
    o.open_fds = 10100;
    burst.Check(o, t += absl::Seconds(1));
  }
  CHECK(burst.stopped());
  ListenerHealth stuck(1);
  ListenerHealth::Decision d;
  for (int i = 0; i < ListenerHealth::kStuckChecks; ++i) {
    Obs o;
    o.queue = 7 + i;
    d = stuck.Check(o, t += absl::Seconds(1));
  }
  CHECK(stuck.stopped());
  CHECK_THAT(d.warning, Contains(std::to_string(6 + ListenerHealth::kStuckChecks) +
                                 " connection(s) waited in its accept queue for " +
                                 std::to_string(ListenerHealth::kStuckChecks) + " checks"));
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

TEST_CASE("descriptor shortage: one exhausted step per episode, recovery asked until it succeeds", "[listener]") {
  using Step = DescriptorShortage::Step;
  DescriptorShortage s;
  CHECK(s.Check(-1) == Step::kNone);  // Not probed.
  CHECK(s.ProbeUpTo() == DescriptorShortage::kLowDescriptors);
  CHECK(s.Check(DescriptorShortage::kLowDescriptors) == Step::kNone);
  CHECK(s.Check(DescriptorShortage::kLowDescriptors - 1) == Step::kExhausted);
  CHECK(s.short_of_descriptors());
  CHECK(s.ProbeUpTo() == DescriptorShortage::kHeadroom);
  CHECK(s.Check(0) == Step::kNone);  // Still out: told once.
  CHECK(s.Check(DescriptorShortage::kHeadroom - 1) == Step::kNone);  // Not enough room yet.
  REQUIRE(s.Check(DescriptorShortage::kHeadroom) == Step::kRecover);
  s.Recovered(false);  // An observer could not: asked again.
  CHECK(s.short_of_descriptors());
  REQUIRE(s.Check(DescriptorShortage::kHeadroom) == Step::kRecover);
  s.Recovered(true);
  CHECK_FALSE(s.short_of_descriptors());
  CHECK(s.Check(DescriptorShortage::kHeadroom) == Step::kNone);
  CHECK(s.Check(0) == Step::kExhausted);  // A new episode.
}

namespace {

// Records what the watch told it; its first recovery fails.
class RecordingObserver : public DescriptorObserver {
 public:
  void OnDescriptorsExhausted() override { exhausted.fetch_add(1); }
  absl::Status OnDescriptorsRecovered() override {
    return recovered.fetch_add(1) == 0 ? absl::AlreadyExistsError("port in use") : absl::OkStatus();
  }
  std::atomic<int> exhausted{0};
  std::atomic<int> recovered{0};
};

bool WaitUntil(const std::function<bool()>& pred, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!pred() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  return pred();
}

// Takes every descriptor the process may open, under a soft limit lowered
// to a few above those open now; gives them and the limit back when
// destroyed (also when the test fails).
struct DescriptorHog {
  rlimit old{};
  std::vector<int> fds;
  DescriptorHog() {
    REQUIRE(getrlimit(RLIMIT_NOFILE, &old) == 0);
    rlimit low = old;
    low.rlim_cur = static_cast<rlim_t>(meshrun::OpenDescriptorCount() + 16);
    REQUIRE(low.rlim_cur < old.rlim_cur);
    REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
    for (int i = 0; i < 64; ++i) {
      const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (fd < 0) break;
      fds.push_back(fd);
    }
    // Two left free: fewer than 4 is exhaustion to the watch, and the
    // sanitizers' runtime needs a pipe (two descriptors) to check memory
    // (UBSan's vptr check reports a valid object as invalid without one).
    for (int i = 0; i < 2 && !fds.empty(); ++i) {
      close(fds.back());
      fds.pop_back();
    }
  }
  void Release() {
    for (int fd : fds) close(fd);
    fds.clear();
    setrlimit(RLIMIT_NOFILE, &old);
  }
  ~DescriptorHog() { Release(); }
};

}  // namespace

TEST_CASE("the listener watch tells its observers when descriptors run out and when they are back", "[listener]") {
  RecordingObserver observer;
  ListenerWatch::Options o;
  o.port = 1;  // No listener of ours: only the descriptors are watched.
  o.interval = absl::Milliseconds(20);
  o.rebuild = [] { return absl::OkStatus(); };
  o.observers = {&observer};
  ListenerWatch watch(std::move(o));
  absl::SleepFor(absl::Milliseconds(100));
  CHECK(observer.exhausted == 0);  // Descriptors to spare: nothing said.
  {
    DescriptorHog hog;
    REQUIRE(meshrun::FreeDescriptors(4) == 2);
    CHECK(WaitUntil([&] { return observer.exhausted == 1; }, absl::Seconds(5)));
    absl::SleepFor(absl::Milliseconds(100));
    CHECK(observer.exhausted == 1);  // Once per episode.
    CHECK(observer.recovered == 0);
  }
  // Free again: recovery is asked, and asked again after it failed once.
  CHECK(WaitUntil([&] { return observer.recovered == 2; }, absl::Seconds(5)));
  absl::SleepFor(absl::Milliseconds(100));
  CHECK(observer.recovered == 2);
  CHECK(observer.exhausted == 1);
}
