#include "lib/core/tick_clock.h"

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace zrt {
namespace {

// CPUID 0x80000007 EDX bit 8: the counter runs at a constant rate in every power state.
bool invariant_counter() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000007u) return false;
  __cpuid(0x80000007u, eax, ebx, ecx, edx);
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

constexpr int64_t kFirstSpanNs = 20'000;  // the constructor's measurement of the rate
constexpr int64_t kMinAnchorNs = 1'000'000;
constexpr int64_t kMaxAnchorNs = 100'000'000;
constexpr int kPairAttempts = 4;

}  // namespace

int64_t TickClock::steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t TickClock::read() const {
#if defined(__x86_64__)
  if (counter_) return __rdtsc();
#endif
  return static_cast<uint64_t>(steady_ns());
}

// Both clocks at one moment: the counter's midpoint around a steady_clock read, the narrowest of
// a few tries. A pair that a preemption split (tens of microseconds under a sanitizer on a loaded
// machine) made the first rate wrong by 70 % (docs/ARCHITECTURE.md#measured-costs).
TickClock::Pair TickClock::read_pair() const {
  Pair best;
  uint64_t best_width = UINT64_MAX;
  for (int attempt = 0; attempt < kPairAttempts; ++attempt) {
    const uint64_t before = read();
    const int64_t ns = steady_ns();
    const uint64_t after = read();
    if (after >= before && after - before < best_width) {
      best_width = after - before;
      best = Pair{before + (after - before) / 2, ns};
    }
  }
  return best;
}

void TickClock::set_rate(const Pair& now) {
  if (now.ticks <= first_.ticks || now.ns <= first_.ns) return;
  ns_per_tick_ =
      static_cast<double>(now.ns - first_.ns) / static_cast<double>(now.ticks - first_.ticks);
  ticks_per_ns_ = 1.0 / ns_per_tick_;
}

TickClock::TickClock() : counter_(invariant_counter()) {
  if (!counter_) return;
  first_ = read_pair();
  Pair now = first_;
  while (now.ns - first_.ns < kFirstSpanNs) now = read_pair();
  if (now.ticks <= first_.ticks) {
    counter_ = false;  // a counter that does not advance is no clock
    return;
  }
  set_rate(now);
  anchor_ = now;
  next_anchor_ticks_ = now.ticks + ticks_in(kMinAnchorNs);
}

void TickClock::reanchor() {
  const Pair now = read_pair();
  set_rate(now);
  anchor_ = now;
  const int64_t span = std::clamp((now.ns - first_.ns) / 8, kMinAnchorNs, kMaxAnchorNs);
  next_anchor_ticks_ = now.ticks + ticks_in(span);
}

int64_t TickClock::to_ns(uint64_t reading) {
  if (!counter_) return static_cast<int64_t>(reading);
  if (reading >= next_anchor_ticks_) reanchor();
  // A reading taken just before the anchor moved lies a little behind it.
  if (reading < anchor_.ticks) return anchor_.ns - duration_ns(reading, anchor_.ticks);
  return anchor_.ns + duration_ns(anchor_.ticks, reading);
}

uint64_t TickClock::ticks_in(int64_t ns) const {
  if (ns <= 0) return 0;
  return std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(ns) * ticks_per_ns_));
}

}  // namespace zrt
