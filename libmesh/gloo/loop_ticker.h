// Keeps the event loop of a Debian Gloo (2022) tcp device turning while
// libmesh needs it, and lowers the loop thread's priority.
//
// That Gloo polls its loop with a fixed 10 ms timeout, and
// unregisterDescriptor() blocks until the loop's next turn. Every pair that
// connects (it closes its listening socket first), every pair's close and
// the device's destruction go through that wait, so connecting a row of n
// ranks took up to (n - 1) x 10 ms; collectives also waited for turns (an
// allreduce over 4 of 8 ranks took 4.0 ms at the median, 0.3 ms with
// turns). LoopTicker is a timerfd registered on the device's loop through
// Gloo's public Device::registerDescriptor: while armed it expires every
// kTickIntervalNs, so each of those waits ends within one interval.
// Disarmed, it costs nothing. (Newer Gloo wakes its loop itself.)
//
// The same loop spins (epoll_wait returning at once, all system time) while
// a peer's data waits for this rank to post its receive. With more ranks
// than cores, the spinning loop threads took the CPU from the threads that
// would post those receives. On its first turn the ticker sets the loop
// thread's nice value to `loop_nice` (MeshOptions::gloo_loop_nice), so a
// spinning loop yields to them; with spare cores it changes nothing.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/tcp/loop.h"

namespace meshrun::mesh::internal {

class LoopTicker : public gloo::transport::tcp::Handler {
 public:
  static constexpr long kTickIntervalNs = 200'000;  // 0.2 ms

  // `loop_nice`: 0 (unchanged) to 19.
  explicit LoopTicker(int loop_nice);
  ~LoopTicker() override;
  LoopTicker(const LoopTicker&) = delete;
  LoopTicker& operator=(const LoopTicker&) = delete;

  // Registers with `device`'s loop; false when no timerfd could be made
  // (then the waits simply take Gloo's 10 ms).
  bool Attach(gloo::transport::tcp::Device& device);

  // Arm/Disarm nest: the loop turns while any holder has it armed.
  // Thread-safe.
  void Arm();
  void Disarm();

  // Called on the loop thread: consumes the expirations (and nices the
  // thread on the first call).
  void handleEvents(int events) override;

 private:
  void Set(long interval_ns);

  const int fd_;
  const int loop_nice_;
  bool niced_ = false;  // loop thread only
  absl::Mutex mu_;
  int armed_ ABSL_GUARDED_BY(mu_) = 0;
};

// Keeps a ticker (may be null) armed for the lifetime of the scope.
class Ticking {
 public:
  explicit Ticking(LoopTicker* ticker) : ticker_(ticker) {
    if (ticker_) ticker_->Arm();
  }
  ~Ticking() {
    if (ticker_) ticker_->Disarm();
  }
  Ticking(const Ticking&) = delete;
  Ticking& operator=(const Ticking&) = delete;

 private:
  LoopTicker* ticker_;
};

// One tcp device (one loop thread, one listening socket per pair) shared
// by every row of a mesh, with its ticker. Destroyed after the last row:
// the ticker stays registered until the loop thread has exited.
struct GlooDevice {
  std::shared_ptr<gloo::transport::tcp::Device> device;
  std::unique_ptr<LoopTicker> ticker;

  ~GlooDevice() {
    Ticking ticking(ticker.get());  // ~Loop joins its thread at the next turn
    device.reset();
  }
  LoopTicker* ticker_or_null() { return ticker.get(); }
};

}  // namespace meshrun::mesh::internal
