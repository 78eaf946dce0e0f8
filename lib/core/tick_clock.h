// TickClock: steady_clock's nanoseconds read from the processor's time-stamp counter, for the
// inline path of small collectives (engine/inline_run.cc), whose every call timestamps its
// start and end for the flight recorder and the busy counters. clock_gettime through the vDSO
// took 26 ns a read on the development machine (a KVM guest), rdtsc 10: two reads a call were a
// tenth of an 8-byte all-reduce (docs/ARCHITECTURE.md#measured-costs). UCX's own clock
// (ucs_get_time) reads the counter the same way.
//
// The counter runs at a constant rate (the invariant TSC; elsewhere every read is steady_clock's).
// The clock converts it from an anchor, a pair of readings of both clocks, with a rate measured
// between the first anchor and the latest: the anchor moves forward (paired reads) once
// the counter ran an eighth of the span measured so far, at least 1 ms and at most 100 ms, so
// that the rate's error (a read's jitter over the span) times the distance from the anchor stays
// within nanoseconds. A conversion never runs backwards within one anchor: durations between
// two readings taken under one anchor are exact to the rate.
//
// Not thread-safe: one owner (the engine keeps one per stream and reads it under its lock).
#pragma once

#include <chrono>
#include <cstdint>

namespace zrt {

class TickClock {
 public:
  TickClock();

  // steady_clock's time since its epoch, in nanoseconds (what to_ns converts to).
  static int64_t steady_ns();
  // A reading: the counter, or steady_clock's nanoseconds where there is no invariant counter.
  uint64_t read() const;
  // steady_clock's time since its epoch, in nanoseconds, at `reading` (taken just before). May
  // move the anchor first.
  int64_t to_ns(uint64_t reading);
  // Nanoseconds between two readings, `to` taken after `from`.
  int64_t duration_ns(uint64_t from, uint64_t to) const {
    return to <= from ? 0 : static_cast<int64_t>(static_cast<double>(to - from) * ns_per_tick_);
  }
  // How far readings advance in `ns` nanoseconds (at least 1 when ns > 0), for spin deadlines.
  uint64_t ticks_in(int64_t ns) const;
  bool uses_counter() const { return counter_; }

 private:
  struct Pair {
    uint64_t ticks = 0;
    int64_t ns = 0;
  };
  Pair read_pair() const;
  void set_rate(const Pair& now);
  void reanchor();

  bool counter_;
  Pair first_;
  Pair anchor_;
  uint64_t next_anchor_ticks_ = 0;
  double ns_per_tick_ = 1.0;
  double ticks_per_ns_ = 1.0;  // its inverse: deadlines multiply instead of dividing
};

}  // namespace zrt
