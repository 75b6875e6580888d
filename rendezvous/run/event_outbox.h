// EventOutbox: a run's events held back until the state they announce is
// durable (docs/design.md section 4d: "every answer is durable, or it is
// not an answer"). A change of a run's durable state (a closed round, a
// restart, a re-form, the run's end) is saved to the journal outside the
// run's lock; the events it makes (ROUND_CLOSED, RESTART, NODE_LOST, a
// stale node's stream end, RUN_FINISHED, RUN_FAILED) must not reach any
// agent before that save succeeded, and must never reach one when it
// failed. Events made while a save is awaited queue behind it, so that
// every stream still sees its events in the order they were made.
//
// Without a journal nothing is ever awaited: every delivery goes out at once
// (the in-memory server pays nothing). Not thread-safe: a Run holds one
// under its lock; sinks follow EventSink's rules (Push never blocks).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "proto/types.h"

namespace meshrun::rendezvous {

class EventOutbox {
 public:
  using Sinks = std::vector<std::shared_ptr<EventSink>>;

  // The record numbered `seq` is being saved: every delivery from now on
  // waits until a record numbered `seq` or higher is saved (Saved).
  void Await(int64_t seq);
  // True while deliveries queue (a save is awaited, or deliveries wait
  // behind one), or for good after Fail.
  bool holding() const { return failed_ || awaited_ > durable_ || !queue_.empty(); }
  // Pushes `event` to each of `to`, now or once the awaited save is done.
  void Push(Sinks to, const RunEvent& event);
  // Ends `sink` as stale (EventSink::CloseStale), now or once the awaited
  // save is done. The sink is already out of the run's streams.
  void CloseStale(std::shared_ptr<EventSink> sink, const std::string& why);
  // A record numbered `seq` was saved: delivers, in order, every delivery
  // that waited for it or for an earlier one.
  void Saved(int64_t seq);
  // A save failed or its outcome is unknown: every delivery held is dropped,
  // and every later one too (the run's state is ahead of its journal; the
  // server stops serving it until a fresh load). A stream whose stale end
  // was held is ended with CloseRun(`why`) instead (UNAVAILABLE: its agent
  // goes on with the next leader), as the run's other streams are when the
  // server drops the run.
  void Fail(const std::string& why);
  bool failed() const { return failed_; }
  // Deliveries queued now (for tests and status).
  size_t queued() const { return queue_.size(); }

 private:
  struct Delivery {
    int64_t wait_seq;  // Delivered once durable_ >= wait_seq.
    Sinks to;
    RunEvent event;
    bool close_stale = false;  // Ends to[0] with `why` instead of pushing `event`.
    std::string why;
  };
  void Deliver(Delivery& d);

  int64_t awaited_ = 0;  // The highest seq awaited.
  int64_t durable_ = 0;  // The highest seq saved.
  bool failed_ = false;
  std::deque<Delivery> queue_;
};

}  // namespace meshrun::rendezvous
