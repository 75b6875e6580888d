// Calls kept for the next leader: what the node's store proxy
// (agent/store_proxy/) and its lighthouse endpoint (agent/lighthouse/) do
// with a forwarded call that met a server gone away (UNAVAILABLE) while the
// agent follows a replicated server's leader. Each kept call is sent again
// when the agent names the next leader (ResendAll), or after `retry_after`
// when none is named by then: the leader the agent follows may itself have
// answered UNAVAILABLE (elected but not serving yet, or paused while its
// etcd lease was unconfirmed), and no next leader will then come to send it
// on. So a kept call waits at most `retry_after` between two sends, never
// until its worker's deadline for a leader change that does not come.
#pragma once

#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshrun::agent {

class KeptCalls {
 public:
  // Sends of one kept call, at most: a backstop under its worker's
  // deadline, which bounds them first (one per retry_after, plus one per
  // leader change).
  static constexpr int kMaxSends = 1000;

  // resend(true): send the call again now (on the owner's current
  // connection); resend(false): answer it, the owner stops.
  using Resend = absl::AnyInvocable<void(bool resend)>;

  // Starts the timer thread; `retry_after` at least 10 ms.
  explicit KeptCalls(absl::Duration retry_after);
  // Stop().
  ~KeptCalls();

  // Keeps `resend` until ResendAll, `retry_after`, or Stop (then at once:
  // resend(false)). Thread-safe; may be called under the owner's lock (it
  // takes only its own, and never runs a Resend under it, except the
  // resend(false) after Stop, which runs in the caller).
  void Add(Resend resend);
  // The next leader is named: every kept call is sent again now. Runs the
  // Resends on the calling thread, without any lock. Thread-safe.
  void ResendAll();
  // Stops the timer and runs resend(false) for every kept call; later Adds
  // run resend(false) at once. Idempotent; thread-safe.
  void Stop();
  // Calls kept now.
  size_t size() const;

 private:
  struct Kept {
    absl::Time since;
    Resend resend;
  };
  void Loop();

  const absl::Duration retry_after_;
  mutable absl::Mutex mu_;
  std::vector<Kept> kept_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;
};

}  // namespace meshrun::agent
