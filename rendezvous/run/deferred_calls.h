// A Run's deferred work (rendezvous/run/run.h): what an operation under the
// run's lock leaves to do once the lock is released. Not thread-safe (one
// operation owns it, on its thread).
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "rendezvous/run/journal.h"

namespace meshrun::rendezvous {

// What an operation does once the run's lock is released (RunAll): the
// save of the run's record, when the operation changed its durable state
// (JournalLocked), then its calls, each told how the save went: OK (no
// save, or saved), or the UNAVAILABLE its callers get instead of their
// answers (the save failed or its outcome is unknown).
struct DeferredCalls {
  std::optional<state::RunRecord> record;
  // Set instead of `record` when the run's durability is already lost.
  absl::Status lost;
  std::vector<absl::AnyInvocable<void(const absl::Status& saved)>> calls;
  // `cb(answer)` once saved; `cb(saved)` when the save failed.
  template <typename Callback, typename Result>
  void Answer(Callback cb, Result answer) {
    calls.push_back([cb = std::move(cb), answer = std::move(answer)](const absl::Status& saved) mutable {
      if (saved.ok()) {
        cb(std::move(answer));
      } else {
        cb(saved);
      }
    });
  }
  // `fn()` once saved; nothing when the save failed.
  void IfSaved(absl::AnyInvocable<void()> fn) {
    calls.push_back([fn = std::move(fn)](const absl::Status& saved) mutable {
      if (saved.ok()) fn();
    });
  }
};

}  // namespace meshrun::rendezvous
