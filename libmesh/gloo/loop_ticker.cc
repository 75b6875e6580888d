#include "gloo/loop_ticker.h"

#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <unistd.h>

namespace meshrun::mesh::internal {

LoopTicker::LoopTicker(int loop_nice)
    : fd_(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)), loop_nice_(loop_nice) {}

LoopTicker::~LoopTicker() {
  if (fd_ >= 0) close(fd_);
}

bool LoopTicker::Attach(gloo::transport::tcp::Device& device) {
  if (fd_ < 0) return false;
  device.registerDescriptor(fd_, EPOLLIN, this);
  return true;
}

void LoopTicker::Arm() {
  absl::MutexLock lock(&mu_);
  if (armed_++ == 0) Set(kTickIntervalNs);
}

void LoopTicker::Disarm() {
  absl::MutexLock lock(&mu_);
  if (--armed_ == 0) Set(0);
}

void LoopTicker::handleEvents(int) {
  if (!niced_) {
    niced_ = true;
    if (loop_nice_ != 0) setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), loop_nice_);
  }
  uint64_t expirations = 0;
  (void)!read(fd_, &expirations, sizeof expirations);
}

void LoopTicker::Set(long interval_ns) {
  itimerspec spec{};
  spec.it_interval.tv_nsec = interval_ns;
  spec.it_value.tv_nsec = interval_ns;
  timerfd_settime(fd_, 0, &spec, nullptr);
}

}  // namespace meshrun::mesh::internal
