#include "rendezvous/run/run_timeline.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace meshrun::rendezvous {
namespace {

std::string Cut(std::string s) {
  if (s.size() > kTimelineDetailBytes) {
    s.resize(kTimelineDetailBytes - 3);
    s += "...";
  }
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

}  // namespace

RunTimeline::RunTimeline(int64_t max_events) : max_events_(std::max<int64_t>(1, max_events)) {}

void RunTimeline::Add(absl::Time time, std::string kind, std::string detail) {
  events_.push_back({time, std::move(kind), Cut(std::move(detail))});
  while (static_cast<int64_t>(events_.size()) > max_events_) {
    events_.pop_front();
    ++dropped_;
  }
}

void RunTimeline::Restore(const std::vector<TimelineEvent>& events, int64_t dropped) {
  events_.clear();
  dropped_ = dropped;
  const size_t keep = std::min(events.size(), static_cast<size_t>(max_events_));
  dropped_ += static_cast<int64_t>(events.size() - keep);
  for (size_t i = events.size() - keep; i < events.size(); ++i) {
    events_.push_back({events[i].time, events[i].kind, Cut(events[i].detail)});
  }
}

std::string DescribeRootCause(const WorkerFailure& f) {
  if (f.rank < 0) return Cut(f.message);  // A lost node: its message says which and why.
  std::string where = absl::StrCat("rank ", f.rank, " (local rank ", f.local_rank, ") of node rank ", f.node_rank,
                                   " (", f.hostname.substr(0, 64), ")");
  std::string how = f.signal != 0 ? absl::StrCat("was killed by signal ", f.signal)
                                  : absl::StrCat("exited with code ", f.exit_code);
  return Cut(absl::StrCat(where, " ", how, f.permanent ? " (permanent)" : ""));
}

}  // namespace meshrun::rendezvous
