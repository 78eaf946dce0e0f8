// The dispatcher: cpuid choice, ZRT_SIMD forcing and refusal, and argument checks. The
// variant is chosen once per process, so ZRT_SIMD is tested in child processes (this same
// binary, re-run on one test with the variable set).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/reduce/kernel_variants.h"
#include "kernels/reduce/reduce_kernels.h"
#include "tests/reduce/reference.h"

extern char** environ;

namespace zrt::testing {
namespace {

using reduce_internal::Variant;

// Runs this binary's ReduceDispatch.DISABLED_ChildReportsVariant with ZRT_SIMD=simd and checks
// that it chose `expected`. Returns the child's exit status.
int run_child(const std::string& simd, const std::string& expected) {
  std::vector<std::string> env_strings = {"ZRT_SIMD=" + simd, "ZRT_TEST_EXPECT_VARIANT=" + expected,
                                          "ZRT_LOG=error"};
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string filter = "--gtest_filter=ReduceDispatch.DISABLED_ChildReportsVariant";
  std::string disabled = "--gtest_also_run_disabled_tests";
  std::string exe = "/proc/self/exe";
  char* argv[] = {exe.data(), filter.data(), disabled.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Disabled: run only as the child above, so that a normal run does not report it as skipped.
TEST(ReduceDispatch, DISABLED_ChildReportsVariant) {
  const char* expected = getenv("ZRT_TEST_EXPECT_VARIANT");
  if (expected == nullptr) GTEST_SKIP() << "only run as a child of ZrtSimdForcesAndRefuses";
  EXPECT_STREQ(reduce_kernels_variant(), expected);
}

std::string best_variant() {
  std::vector<Variant> variants = supported_variants();
  return reduce_internal::variant_name(variants.back());
}

TEST(ReduceDispatch, PicksTheBestSupportedVariant) {
  if (getenv("ZRT_SIMD") != nullptr) GTEST_SKIP() << "ZRT_SIMD is set";
  EXPECT_EQ(reduce_kernels_variant(), best_variant());
  EXPECT_EQ(&reduce_internal::active_kernel_table(),
            reduce_internal::kernel_table(supported_variants().back()));
}

TEST(ReduceDispatch, ZrtSimdForcesAndRefuses) {
  for (Variant v : supported_variants()) {
    const char* name = reduce_internal::variant_name(v);
    EXPECT_EQ(run_child(name, name), 0) << "ZRT_SIMD=" << name;
  }
  EXPECT_EQ(run_child("sse9000", best_variant()), 0) << "unknown names fall back";
  for (Variant v : {Variant::kAvx2, Variant::kAvx512}) {
    if (!reduce_internal::variant_supported(v)) {
      EXPECT_EQ(run_child(reduce_internal::variant_name(v), best_variant()), 0)
          << "an unsupported variant is refused";
    }
  }
}

TEST(ReduceDispatch, BadArgumentsAreRefusedWithAMessageAndLeaveOutputAlone) {
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 1, 1}, out[4] = {9, 9, 9, 9};
  Status s = check_reduce_args(static_cast<zrt_dtype_t>(42), ReduceOp::kSum, 1.0, 1.0);
  EXPECT_EQ(s.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("dtype"), std::string::npos) << s.message();
  s = check_reduce_args(ZRT_I32, ReduceOp::kSum, 0.5, 1.0);
  EXPECT_EQ(s.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("i32"), std::string::npos) << s.message();
  s = check_reduce_args(ZRT_F32, ReduceOp::kMax, 0.5, 1.0);
  EXPECT_EQ(s.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(check_reduce_args(ZRT_F32, ReduceOp::kSum, 0.5, 2.0).is_ok());
  EXPECT_EQ(check_scale_args(ZRT_I8).code(), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(check_convert_args(ZRT_F32, ZRT_I32).code(), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(check_convert_args(ZRT_BF16, ZRT_F16).is_ok());

  reduce_elements(static_cast<zrt_dtype_t>(42), ReduceOp::kSum, a, b, out, 4);
  reduce_elements(ZRT_F32, static_cast<ReduceOp>(9), a, b, out, 4);
  reduce_elements(ZRT_F32, ReduceOp::kSum, nullptr, b, out, 4);
  scale_elements(ZRT_I32, a, out, 4, 2.0);
  convert_elements(ZRT_F32, a, ZRT_I8, out, 4);
  for (float v : out) EXPECT_EQ(v, 9.0f);
  double sum = -1;
  bool bad = true;
  sum_squares_and_nonfinite(ZRT_F32, nullptr, 4, &sum, &bad);
  EXPECT_EQ(sum, -1);
  reduce_elements(ZRT_F32, ReduceOp::kSum, nullptr, nullptr, nullptr, 0);  // count 0: fine
  reduce_elements(ZRT_F32, ReduceOp::kSum, a, b, out, 4);
  EXPECT_EQ(out[3], 5.0f);
}

}  // namespace
}  // namespace zrt::testing
