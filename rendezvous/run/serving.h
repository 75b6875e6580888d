// The one thing a run asks of the server replica it lives in: whether the
// replica serves now. A port: rendezvous/state/serving_gate.h implements it
// (a replica that leads, has loaded the state and is not paused); a single
// server has none (always serving).
#pragma once

namespace meshrun::rendezvous {

class ServingCheck {
 public:
  virtual ~ServingCheck() = default;
  // Whether calls are served now. Thread-safe, cheap (a hot path).
  virtual bool serving() const = 0;
};

}  // namespace meshrun::rendezvous
