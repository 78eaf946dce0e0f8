#include "lib/core/tick_clock.h"

#include <algorithm>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace zrt {
namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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

}  // namespace

uint64_t TickClock::read() const {
#if defined(__x86_64__)
  if (counter_) return __rdtsc();
#endif
  return static_cast<uint64_t>(steady_ns());
}

TickClock::TickClock() : counter_(invariant_counter()) {
  if (!counter_) return;
  first_ticks_ = read();
  first_ns_ = steady_ns();
  int64_t ns = first_ns_;
  uint64_t now = first_ticks_;
  while (ns - first_ns_ < kFirstSpanNs) {
    now = read();
    ns = steady_ns();
  }
  if (now <= first_ticks_) {
    counter_ = false;  // a counter that does not advance is no clock
    return;
  }
  ns_per_tick_ = static_cast<double>(ns - first_ns_) / static_cast<double>(now - first_ticks_);
  ticks_per_ns_ = 1.0 / ns_per_tick_;
  anchor_ticks_ = now;
  anchor_ns_ = ns;
  next_anchor_ticks_ = now + ticks_in(kMinAnchorNs);
}

// `reading` was taken a moment ago; the steady_clock read now stands for it.
void TickClock::reanchor(uint64_t reading) {
  const int64_t ns = steady_ns();
  if (reading > first_ticks_ && ns > first_ns_) {
    ns_per_tick_ =
        static_cast<double>(ns - first_ns_) / static_cast<double>(reading - first_ticks_);
    ticks_per_ns_ = 1.0 / ns_per_tick_;
  }
  anchor_ticks_ = reading;
  anchor_ns_ = ns;
  const int64_t span = std::clamp((ns - first_ns_) / 8, kMinAnchorNs, kMaxAnchorNs);
  next_anchor_ticks_ = reading + ticks_in(span);
}

int64_t TickClock::to_ns(uint64_t reading) {
  if (!counter_) return static_cast<int64_t>(reading);
  if (reading >= next_anchor_ticks_ || reading < anchor_ticks_) reanchor(reading);
  return anchor_ns_ + duration_ns(anchor_ticks_, reading);
}

uint64_t TickClock::ticks_in(int64_t ns) const {
  if (ns <= 0) return 0;
  return std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(ns) * ticks_per_ns_));
}

}  // namespace zrt
