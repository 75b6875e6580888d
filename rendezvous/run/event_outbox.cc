#include "rendezvous/run/event_outbox.h"

#include <algorithm>
#include <utility>

namespace meshrun::rendezvous {

void EventOutbox::Await(int64_t seq) { awaited_ = std::max(awaited_, seq); }

void EventOutbox::Push(Sinks to, const RunEvent& event) {
  if (failed_) return;
  Delivery d{awaited_, std::move(to), event, false, {}};
  if (!holding()) {
    Deliver(d);
    return;
  }
  queue_.push_back(std::move(d));
}

void EventOutbox::CloseStale(std::shared_ptr<EventSink> sink, const std::string& why) {
  if (failed_ || sink == nullptr) return;
  Delivery d{awaited_, Sinks{std::move(sink)}, RunEvent{}, true, why};
  if (!holding()) {
    Deliver(d);
    return;
  }
  queue_.push_back(std::move(d));
}

void EventOutbox::Saved(int64_t seq) {
  if (failed_) return;
  durable_ = std::max(durable_, seq);
  while (!queue_.empty() && queue_.front().wait_seq <= durable_) {
    Delivery d = std::move(queue_.front());
    queue_.pop_front();
    Deliver(d);
  }
}

void EventOutbox::Fail(const std::string& why) {
  failed_ = true;
  for (Delivery& d : queue_) {
    if (d.close_stale) d.to.front()->CloseRun(why);
  }
  std::deque<Delivery>().swap(queue_);
}

void EventOutbox::Deliver(Delivery& d) {
  if (d.close_stale) {
    d.to.front()->CloseStale(d.why);
    return;
  }
  for (const std::shared_ptr<EventSink>& s : d.to) s->Push(d.event);
}

}  // namespace meshrun::rendezvous
