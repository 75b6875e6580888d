// Keeps the server accepting connections after it ran out of file
// descriptors. gRPC's listener (gRPC 1.51, Debian 12) stops for good after
// one failed accept4 (EMFILE, ENFILE, ENOBUFS, ENOMEM: grpc/grpc#20418,
// fixed in gRPC 1.57 by grpc/grpc#33656): it logs "Failed accept4" once, at
// its error level, and never polls the socket again; the kernel goes on
// completing handshakes into the socket's queue, so clients connect and
// then wait forever. The connections it had keep working.
//
// ListenerHealth decides (pure); ListenerWatch observes on a thread of its
// own and acts through the server's callbacks: it rebuilds the listener
// once descriptors are free, and retires older server generations whose
// calls have all ended. It is also the process's one detector of running
// out of descriptors (DescriptorShortage decides, pure): it tells its
// DescriptorObservers (the metrics port) when descriptors run out and when
// they are free again. No gRPC here.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace meshrun::rendezvous {

class ListenerHealth {
 public:
  // Descriptors that must be free before the listener is rebuilt (the new
  // listener and its first connections need some).
  static constexpr int64_t kHeadroom = 32;
  // Checks in a row with a non-empty, non-shrinking accept queue and no
  // sign of accepting (neither the count of connections nor the process's
  // open descriptors grew) after which the listener counts as stopped even
  // without a reported failure. Its rebuild resets the queued connections,
  // so a busy listener must never be taken for a stopped one: at 10,000
  // agents a server short of CPU left hundreds queued for 5 s while it
  // still accepted, and each false rebuild sent them all back to retry.
  static constexpr int kStuckChecks = 10;
  // Longest wait between rebuilds when episodes follow each other: with a
  // 1 s check, new connections are accepted again within 5 s of
  // descriptors being free.
  static constexpr absl::Duration kMaxRebuildGap = absl::Seconds(4);
  // A second episode's warning within this time is logged at info.
  static constexpr absl::Duration kWarnEvery = absl::Minutes(1);

  struct Observation {
    // Failed accepts (for want of resources) gRPC reported since the last
    // check, and the last one's reason ("Too many open files").
    int64_t accept_failures = 0;
    std::string failure;
    // Connections waiting in the listen queue; -1 when unknown.
    int64_t queue = -1;
    // Connections the server has accepted so far (a counter that grows
    // while the listener works: the traffic counters' count); -1 when
    // unknown.
    int64_t accepted = -1;
    // Descriptors open now and the soft limit; -1 when unknown.
    int64_t open_fds = -1;
    int64_t fd_limit = -1;
    // Descriptors that could be opened now, counted up to kHeadroom; -1
    // when not probed.
    int64_t free_fds = -1;
  };
  struct Decision {
    bool rebuild = false;
    std::string warning;  // Log at warning level (once per episode).
    std::string info;     // Log at info level.
  };

  explicit ListenerHealth(int port) : port_(port) {}

  // One check at `now`. An episode starts when gRPC reported a failed
  // accept while connections wait in this listener's queue (or its queue is
  // unknown), or when the accept queue stayed non-empty and did not shrink
  // for kStuckChecks checks with no sign of accepting (a busy listener that
  // accepts is not stuck); its first decision carries the
  // warning. While it lasts, `rebuild` is set once kHeadroom descriptors
  // are free (or that was not probed), at most once per backoff (0 s;
  // 1 s, doubling up to kMaxRebuildGap while episodes follow each other
  // within 10 s). Not thread-safe.
  Decision Check(const Observation& o, absl::Time now);
  // The outcome of the rebuild Check asked for: OK ends the episode (an
  // info line says after how long); an error is warned about once per
  // episode and retried at the next check.
  Decision Rebuilt(const absl::Status& outcome, absl::Time now);
  // True while the listener is known to be stopped.
  bool stopped() const { return stopped_; }

 private:
  const int port_;
  bool stopped_ = false;
  std::string reason_;
  absl::Time since_ = absl::InfinitePast();
  int stuck_ = 0;
  int64_t last_queue_ = -1;
  int64_t last_accepted_ = -1;
  int64_t last_open_fds_ = -1;
  absl::Time last_warning_ = absl::InfinitePast();
  bool warned_rebuild_error_ = false;
  absl::Time last_rebuild_ = absl::InfinitePast();
  absl::Duration gap_ = absl::ZeroDuration();
  absl::Time next_try_ = absl::InfinitePast();
};

// Whether the process is out of file descriptors, as DescriptorObservers
// are told. An episode starts when fewer than kLowDescriptors are free and
// ends once kHeadroom are free and every observer has recovered. Pure; not
// thread-safe.
class DescriptorShortage {
 public:
  static constexpr int64_t kLowDescriptors = 4;
  static constexpr int64_t kHeadroom = ListenerHealth::kHeadroom;

  enum class Step {
    kNone,
    kExhausted,  // Tell the observers that descriptors ran out (once per episode).
    kRecover,    // Ask the observers to recover; report with Recovered().
  };

  // One check with `free_fds` descriptors free, counted up to ProbeUpTo()
  // (-1: not probed, kNone).
  Step Check(int64_t free_fds);
  // The outcome of a kRecover step: true (every observer recovered) ends the
  // episode; false asks again at the next check with kHeadroom free.
  void Recovered(bool all_ok);
  // How many free descriptors the next check needs to count: kLowDescriptors
  // outside an episode (a probe takes them for an instant), kHeadroom in one.
  int64_t ProbeUpTo() const { return short_ ? kHeadroom : kLowDescriptors; }
  // True during an episode.
  bool short_of_descriptors() const { return short_; }

 private:
  bool short_ = false;
};

// A party told of descriptor shortage episodes by ListenerWatch (the metrics
// port, whose HTTP server would spin on a connection it cannot accept).
class DescriptorObserver {
 public:
  virtual ~DescriptorObserver() = default;
  // Fewer than DescriptorShortage::kLowDescriptors descriptors are free:
  // called once per episode, on the watch's thread.
  virtual void OnDescriptorsExhausted() = 0;
  // DescriptorShortage::kHeadroom descriptors are free again, after
  // OnDescriptorsExhausted. An error means "not yet": it is called again at
  // the next check with enough free (not after it returned OK). On the
  // watch's thread.
  virtual absl::Status OnDescriptorsRecovered() = 0;
};

class ListenerWatch {
 public:
  struct Options {
    int port = 0;
    absl::Duration interval = absl::Seconds(1);
    // Replaces the stopped listener with a new one on the same port; the
    // connections of the old one must go on being served.
    std::function<absl::Status()> rebuild;
    // Runs after every check (the server retires idle old generations).
    std::function<void()> after_check;
    // Connections accepted so far (ListenerHealth::Observation::accepted);
    // unknown when empty.
    std::function<int64_t()> accepted;
    // Told when descriptors run out and when they are free again; they must
    // outlive the watch. With none, free descriptors are counted only while
    // the listener is in trouble.
    std::vector<DescriptorObserver*> observers;
  };

  // Starts checking every `options.interval`.
  explicit ListenerWatch(Options options);
  // Stops the thread (waits for a check in progress).
  ~ListenerWatch();
  ListenerWatch(const ListenerWatch&) = delete;
  ListenerWatch& operator=(const ListenerWatch&) = delete;

  // Called from gRPC's log hook for its "Failed accept4: <reason>" line:
  // counts it when the reason is a want of resources (descriptors, buffers,
  // memory), whose failure stops gRPC's listener. Process-wide (gRPC's log
  // does not say which server): every watch of the process checks its own
  // listener then. Thread-safe; takes no lock the log hook could hold.
  static void NoteAcceptFailure(absl::string_view message);
  // True for "Failed accept4: Too many open files" and the other reasons
  // NoteAcceptFailure counts. Pure.
  static bool IsResourceFailure(absl::string_view message);

 private:
  void Loop();
  ListenerHealth::Observation Observe();
  // Tells the observers what shortage_ decides for `free_fds`.
  void TellObservers(int64_t free_fds);

  const Options options_;
  ListenerHealth health_;
  DescriptorShortage shortage_;
  std::vector<bool> recovered_;  // Per observer, during an episode.
  int64_t failures_seen_ = 0;
  std::vector<int> fds_;  // The listener's descriptors, when found.
  bool rescan_ = true;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace meshrun::rendezvous
