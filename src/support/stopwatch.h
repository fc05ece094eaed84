// Wall-clock durations for reports (compile, load and run times), on the monotonic clock: never the
// system clock, which can jump.
#pragma once

#include <chrono>

namespace kiln::support {

using Clock = std::chrono::steady_clock;

// Milliseconds since `t0`.
inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Started when made: `Stopwatch sw; ...; report.ms = sw.ms();`.
class Stopwatch {
 public:
  Stopwatch() : t0_(Clock::now()) {}
  double ms() const { return ms_since(t0_); }
  void restart() { t0_ = Clock::now(); }
  Clock::time_point start() const { return t0_; }

 private:
  Clock::time_point t0_;
};

}  // namespace kiln::support
