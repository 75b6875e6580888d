// One thread that runs callbacks at deadlines: every timeout of the server
// (store waits, last call, exit barrier) is an entry here, never a sleeping
// thread per client.
#pragma once

#include <cstdint>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshrun::rendezvous {

class DeadlineTimer {
 public:
  using Id = uint64_t;

  DeadlineTimer();
  // Stops the thread; callbacks not yet run are dropped without running.
  ~DeadlineTimer();
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Runs `fn` on the timer thread at or soon after `when`. Callbacks run one
  // at a time, outside the timer's lock, so they may call Schedule/Cancel.
  // O(log n). Thread-safe.
  Id Schedule(absl::Time when, absl::AnyInvocable<void()> fn);

  // Removes the entry; true when it had not started running. Thread-safe.
  bool Cancel(Id id);

  // As Cancel, and when the callback is running right now on the timer
  // thread, waits until it has returned (so that what it uses may then be
  // destroyed). Must not be called while holding a lock that the callback
  // takes; from the timer thread itself it does not wait. Thread-safe.
  bool CancelAndWait(Id id);

 private:
  void Loop();

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Id next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::multimap<absl::Time, Id> by_time_ ABSL_GUARDED_BY(mu_);
  struct Entry {
    std::multimap<absl::Time, Id>::iterator pos;
    absl::AnyInvocable<void()> fn;
  };
  absl::flat_hash_map<Id, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // The entry whose callback runs now, 0 for none.
  Id running_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace meshrun::rendezvous
