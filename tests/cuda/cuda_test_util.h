// Helpers shared by the CUDA tests: whether a device is usable, and the skip that says why not.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "device/device_probe.h"

namespace zrt::testing {

// Empty when a CUDA device is usable; else the runtime's reason.
inline std::string cuda_unusable_reason() {
  int count = 0;
  Status status = cuda_device_count(&count);
  return status.is_ok() ? std::string() : status.message();
}

}  // namespace zrt::testing

// Skips the current test, with the runtime's reason, when no CUDA device is usable.
#define ZRT_SKIP_WITHOUT_CUDA()                                                  \
  do {                                                                           \
    const std::string zrt_cuda_reason_ = ::zrt::testing::cuda_unusable_reason(); \
    if (!zrt_cuda_reason_.empty()) GTEST_SKIP() << zrt_cuda_reason_;             \
  } while (0)
