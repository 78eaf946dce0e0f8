// The libFuzzer entry point of one target: ZRT_FUZZ_TARGET names its function (meson passes it
// per executable). A finding is printed and turned into an abort so that libFuzzer keeps the
// input as a crash file; move such files to tests/fuzz/regressions/<target>/ once fixed.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string finding = zrt::fuzz::ZRT_FUZZ_TARGET(data, size);
  if (!finding.empty()) {
    std::fprintf(stderr, "zrt fuzz finding: %s\n", finding.c_str());
    std::abort();
  }
  return 0;
}
