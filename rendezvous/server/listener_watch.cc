#include "rendezvous/server/listener_watch.h"

#include <string.h>

#include <algorithm>
#include <cerrno>

#include "absl/base/const_init.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/open_files.h"
#include "rendezvous/server/listen_socket.h"

namespace meshrun::rendezvous {
namespace {

std::atomic<int64_t> g_accept_failures{0};
ABSL_CONST_INIT absl::Mutex g_reason_mu(absl::kConstInit);
std::string* g_reason ABSL_GUARDED_BY(g_reason_mu) = nullptr;

std::string LastReason() {
  absl::MutexLock lock(&g_reason_mu);
  return g_reason ? *g_reason : "";
}

std::string Descriptors(const ListenerHealth::Observation& o) {
  if (o.open_fds < 0 || o.fd_limit < 0) return "";
  return absl::StrCat("; ", o.open_fds, " of ", o.fd_limit, " file descriptors open");
}

void Log(const ListenerHealth::Decision& d) {
  if (!d.warning.empty()) Logger("rdzv")->warn("{}", d.warning);
  if (!d.info.empty()) Logger("rdzv")->info("{}", d.info);
}

}  // namespace

ListenerHealth::Decision ListenerHealth::Check(const Observation& o, absl::Time now) {
  Decision d;
  // A stopped listener keeps the connection it failed to accept in its
  // queue: an empty queue means the failure was another server's of this
  // process (the log line does not say whose).
  if (o.accept_failures > 0 && o.queue != 0 && !stopped_) {
    stopped_ = true;
    reason_ = o.failure.empty() ? "an accept failed" : o.failure;
  }
  if (!stopped_) {
    auto grew = [](int64_t now, int64_t before) { return now >= 0 && before >= 0 && now > before; };
    const bool accepting = grew(o.accepted, last_accepted_) || grew(o.open_fds, last_open_fds_);
    stuck_ = o.queue > 0 && o.queue >= last_queue_ && !accepting ? stuck_ + 1 : 0;
    last_queue_ = o.queue;
    last_accepted_ = o.accepted;
    last_open_fds_ = o.open_fds;
    if (stuck_ >= kStuckChecks) {
      stopped_ = true;
      reason_ = absl::StrCat(o.queue, " connection(s) waited in its accept queue for ", kStuckChecks, " checks");
    }
  }
  if (!stopped_) return d;
  if (since_ == absl::InfinitePast()) {
    since_ = now;
    warned_rebuild_error_ = false;
    std::string text = absl::StrCat(
        "the rendezvous server on port ", port_, " stopped accepting new connections (", reason_, Descriptors(o),
        "); it goes on serving the connections it has and accepts new ones again once descriptors are free "
        "(raise the open files limit: docs/user-guide.md, Open files)");
    if (now - last_warning_ >= kWarnEvery) {
      d.warning = std::move(text);
      last_warning_ = now;
    } else {
      d.info = std::move(text);
    }
  }
  const bool room = o.free_fds < 0 || o.free_fds >= kHeadroom;
  d.rebuild = room && now >= next_try_;
  return d;
}

ListenerHealth::Decision ListenerHealth::Rebuilt(const absl::Status& outcome, absl::Time now) {
  Decision d;
  if (!outcome.ok()) {
    if (!warned_rebuild_error_) {
      d.warning = absl::StrCat("could not rebuild the listener on port ", port_, ": ", outcome.message(),
                               "; retrying at every check");
      warned_rebuild_error_ = true;
    }
    return d;
  }
  d.info = absl::StrCat("accepting new connections on port ", port_, " again, ",
                        absl::FormatDuration(now - since_), " after it stopped (listener rebuilt)");
  // Episodes that follow each other closely (the limit is too low for the
  // load) are rebuilt less and less often.
  gap_ = now - last_rebuild_ < absl::Seconds(10)
             ? std::min(std::max(gap_ * 2, absl::Seconds(1)), kMaxRebuildGap)
             : absl::ZeroDuration();
  last_rebuild_ = now;
  next_try_ = now + gap_;
  stopped_ = false;
  since_ = absl::InfinitePast();
  stuck_ = 0;
  last_queue_ = -1;
  last_accepted_ = -1;
  last_open_fds_ = -1;
  return d;
}

DescriptorShortage::Step DescriptorShortage::Check(int64_t free_fds) {
  if (free_fds < 0) return Step::kNone;
  if (!short_) {
    if (free_fds >= kLowDescriptors) return Step::kNone;
    short_ = true;
    return Step::kExhausted;
  }
  return free_fds >= kHeadroom ? Step::kRecover : Step::kNone;
}

void DescriptorShortage::Recovered(bool all_ok) {
  if (all_ok) short_ = false;
}

bool ListenerWatch::IsResourceFailure(absl::string_view message) {
  if (!absl::StartsWith(message, "Failed accept4")) return false;
  for (int e : {EMFILE, ENFILE, ENOBUFS, ENOMEM}) {
    const char* text = ::strerrordesc_np(e);
    if (text != nullptr && absl::StrContains(message, text)) return true;
  }
  return false;
}

void ListenerWatch::NoteAcceptFailure(absl::string_view message) {
  if (!IsResourceFailure(message)) return;
  {
    absl::MutexLock lock(&g_reason_mu);
    if (g_reason == nullptr) g_reason = new std::string();  // Never freed: the log hook may run at exit.
    const size_t colon = message.find(": ");
    *g_reason = std::string(colon == absl::string_view::npos ? message : message.substr(colon + 2));
  }
  g_accept_failures.fetch_add(1);
}

ListenerWatch::ListenerWatch(Options options)
    : options_(std::move(options)),
      health_(options_.port),
      recovered_(options_.observers.size(), true),
      failures_seen_(g_accept_failures.load()) {
  thread_ = std::thread([this] { Loop(); });
}

ListenerWatch::~ListenerWatch() {
  stop_.Notify();
  thread_.join();
}

ListenerHealth::Observation ListenerWatch::Observe() {
  ListenerHealth::Observation o;
  const int64_t total = g_accept_failures.load();
  o.accept_failures = total - failures_seen_;
  failures_seen_ = total;
  if (o.accept_failures > 0) o.failure = LastReason();
  if (options_.accepted) o.accepted = options_.accepted();
  const bool valid = !fds_.empty() && std::all_of(fds_.begin(), fds_.end(), [&](int fd) {
    return IsListeningOn(fd, options_.port);
  });
  if (!valid && rescan_) {
    fds_ = ListeningSockets(options_.port);
    rescan_ = false;  // Again after a rebuild only: a scan costs O(descriptors).
  }
  for (int fd : fds_) {
    const int64_t q = AcceptQueueLength(fd);
    if (q >= 0) o.queue = std::max<int64_t>(o.queue, 0) + q;
  }
  const bool trouble = o.accept_failures > 0 || o.queue > 0 || health_.stopped();
  if (trouble || shortage_.short_of_descriptors()) {
    o.free_fds = FreeDescriptors(ListenerHealth::kHeadroom);
  } else if (!options_.observers.empty()) {
    o.free_fds = FreeDescriptors(shortage_.ProbeUpTo());  // A few, for an instant.
  }
  if (trouble) {
    if (absl::StatusOr<OpenFilesLimit> l = CurrentOpenFilesLimit(); l.ok() && l->soft < (1ULL << 62)) {
      o.fd_limit = static_cast<int64_t>(l->soft);
    }
    o.open_fds = OpenDescriptorCount();
    // Reading /proc/self/fd takes a descriptor too.
    if (o.open_fds < 0 && o.free_fds == 0) o.open_fds = o.fd_limit;
  }
  return o;
}

void ListenerWatch::TellObservers(int64_t free_fds) {
  if (options_.observers.empty()) return;
  switch (shortage_.Check(free_fds)) {
    case DescriptorShortage::Step::kNone:
      return;
    case DescriptorShortage::Step::kExhausted:
      for (size_t i = 0; i < options_.observers.size(); ++i) {
        recovered_[i] = false;
        options_.observers[i]->OnDescriptorsExhausted();
      }
      return;
    case DescriptorShortage::Step::kRecover: {
      bool all = true;
      for (size_t i = 0; i < options_.observers.size(); ++i) {
        if (!recovered_[i]) recovered_[i] = options_.observers[i]->OnDescriptorsRecovered().ok();
        all = all && recovered_[i];
      }
      shortage_.Recovered(all);
      return;
    }
  }
}

void ListenerWatch::Loop() {
  while (!stop_.WaitForNotificationWithTimeout(options_.interval)) {
    const ListenerHealth::Observation o = Observe();
    ListenerHealth::Decision d = health_.Check(o, absl::Now());
    Log(d);
    // Observers give up their descriptors before a rebuild needs some, and
    // take them again after it (the listener first).
    const bool was_short = shortage_.short_of_descriptors();
    if (!was_short) TellObservers(o.free_fds);
    if (d.rebuild) {
      absl::Status s = options_.rebuild();
      Log(health_.Rebuilt(s, absl::Now()));
      rescan_ = true;
    }
    if (was_short) TellObservers(o.free_fds);
    if (options_.after_check) options_.after_check();
  }
}

}  // namespace meshrun::rendezvous
