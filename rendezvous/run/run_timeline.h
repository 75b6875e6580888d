// A run's timeline: what happened to it and when (rounds closed, restarts
// with their root cause, lost nodes, re-forms, failovers of the replicated
// server, its end), for `meshrun status --events`. Bounded: the last
// ServerLimits::max_run_events entries are kept, each detail cut at
// kTimelineDetailBytes; older ones are counted as dropped. Durable with the
// run (RunRecord::timeline, rendezvous/run/journal.h): a failover keeps it.
// Pure domain; not thread-safe (the Run's lock guards it).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/types.h"

namespace meshrun::rendezvous {

// The longest detail kept, bytes (longer ones end in "...").
inline constexpr size_t kTimelineDetailBytes = 200;
// What one entry is charged in the memory budget, bytes: the detail, the
// kind and the deque's slot (memory_budget.h's kRunCost covers a run's
// timeline at max_run_events of them).
inline constexpr int64_t kTimelineEventCost = 320;

class RunTimeline {
 public:
  // Keeps at most `max_events` (>= 1) entries.
  explicit RunTimeline(int64_t max_events);

  // Appends one entry; the oldest is dropped past the bound.
  void Add(absl::Time time, std::string kind, std::string detail);
  // Replaces every entry (a restore): the newest `max_events` of `events`
  // are kept, the rest counted with `dropped` as dropped.
  void Restore(const std::vector<TimelineEvent>& events, int64_t dropped);

  std::vector<TimelineEvent> Events() const { return {events_.begin(), events_.end()}; }
  int64_t dropped() const { return dropped_; }

 private:
  int64_t max_events_;
  std::deque<TimelineEvent> events_;
  int64_t dropped_ = 0;
};

// "rank 3 (local rank 1) of node rank 1 (host1) exited with code 1", "...
// was killed by signal 9", or a lost node's message, cut to fit a detail.
// Pure.
std::string DescribeRootCause(const WorkerFailure& f);

}  // namespace meshrun::rendezvous
