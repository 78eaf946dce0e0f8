#include "device/poll_wait.h"

#include <chrono>
#include <thread>

namespace zrt {

Status poll_until(int64_t timeout_ms, const char* what, const std::function<Status()>& check) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  std::chrono::microseconds sleep(20);
  constexpr std::chrono::microseconds kMaxSleep(1000);
  for (;;) {
    Status status = check();
    if (status.code() != ZRT_IN_PROGRESS) return status;
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    if (timeout_ms > 0 && waited >= timeout_ms) {
      return Status::error(ZRT_TIMEOUT, "{}: not complete after {} ms (the communicator's timeout)",
                           what, waited);
    }
    std::this_thread::sleep_for(sleep);
    if (sleep < kMaxSleep) sleep *= 2;
  }
}

}  // namespace zrt
