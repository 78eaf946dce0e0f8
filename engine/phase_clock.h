// PhaseClock: where a collective's time goes on the progress thread, for bench_breakdown. Off
// unless a benchmark turns it on (one relaxed load per loop turn then); on, the thread adds the
// nanoseconds of each part of its turns while a communicating task is in flight:
//   task      inside Task::start/progress: posting operations, copies into and out of windows
//             and staging, reductions;
//   transport inside Transport::progress: UCX moving and completing messages;
//   poll      the bounded poll (EngineOptions::busy_poll_us): turns that found nothing yet,
//             kept awake so that a notification does not pay a wake-up;
//   sleep     blocked in poll() on the transport's and the engine's fds, and how many times
//             (each one a wake-up to pay when the peer's message arrives).
// The rest of a collective (queueing before its start, the host waiter's own wake-up after its
// end) the benchmark reads from the flight recorder's posted/started/done times.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace zrt {

class PhaseClock {
 public:
  struct Totals {
    uint64_t task_ns = 0;
    uint64_t transport_ns = 0;
    uint64_t poll_ns = 0;
    uint64_t sleep_ns = 0;
    uint64_t sleeps = 0;
  };
  enum class Part { kTask, kTransport, kPoll, kSleep };

  void enable(bool on) { on_.store(on, std::memory_order_relaxed); }
  bool on() const { return on_.load(std::memory_order_relaxed); }

  void add(Part part, uint64_t ns) {
    parts_[static_cast<int>(part)].fetch_add(ns, std::memory_order_relaxed);
    if (part == Part::kSleep) sleeps_.fetch_add(1, std::memory_order_relaxed);
  }

  Totals read() const {
    Totals totals;
    totals.task_ns = parts_[0].load(std::memory_order_relaxed);
    totals.transport_ns = parts_[1].load(std::memory_order_relaxed);
    totals.poll_ns = parts_[2].load(std::memory_order_relaxed);
    totals.sleep_ns = parts_[3].load(std::memory_order_relaxed);
    totals.sleeps = sleeps_.load(std::memory_order_relaxed);
    return totals;
  }

  void reset() {
    for (auto& part : parts_) part.store(0, std::memory_order_relaxed);
    sleeps_.store(0, std::memory_order_relaxed);
  }

 private:
  std::atomic<bool> on_{false};
  std::atomic<uint64_t> parts_[4] = {};
  std::atomic<uint64_t> sleeps_{0};
};

// One turn of the progress thread against a PhaseClock: add() gives the time since the last
// mark to a part and moves the mark, skip() only moves it. Both do nothing, and read no time,
// while the clock is off.
class PhaseMark {
 public:
  explicit PhaseMark(PhaseClock& clock) : clock_(clock), on_(clock.on()) {
    if (on_) mark_ = std::chrono::steady_clock::now();
  }

  bool on() const { return on_; }
  void add(PhaseClock::Part part) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - mark_).count();
    clock_.add(part, static_cast<uint64_t>(ns));
    mark_ = now;
  }
  void skip() {
    if (on_) mark_ = std::chrono::steady_clock::now();
  }

 private:
  PhaseClock& clock_;
  const bool on_;
  std::chrono::steady_clock::time_point mark_;
};

}  // namespace zrt
