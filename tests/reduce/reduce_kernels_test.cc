// reduce_elements, scale_elements and sum_squares_and_nonfinite in every variant this CPU
// runs, against the scalar references, and every variant against the generic one bit for bit.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/reduce/kernel_variants.h"
#include "kernels/reduce/reduce_kernels.h"
#include "lib/core/dtype.h"
#include "tests/reduce/reference.h"

namespace zrt::testing {
namespace {

using reduce_internal::KernelOptions;
using reduce_internal::Variant;

constexpr zrt_dtype_t kAllDtypes[] = {ZRT_F32, ZRT_F64, ZRT_F16, ZRT_BF16,
                                      ZRT_I8,  ZRT_U8,  ZRT_I32, ZRT_I64};
constexpr zrt_dtype_t kFloatDtypes[] = {ZRT_F32, ZRT_F64, ZRT_F16, ZRT_BF16};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax};
constexpr size_t kCounts[] = {0, 1, 7, 15, 16, 17, 1023, 4097};

enum class Alias { kNone, kOutIsA, kOutIsB };

// A buffer of count elements at `misalign` elements past a 64-byte boundary, with a guard
// element on each side that must survive every call.
class Buffer {
 public:
  Buffer(zrt_dtype_t dtype, size_t count, size_t misalign)
      : size_(dtype_size(dtype)),
        count_(count),
        misalign_(misalign),
        storage_((count + misalign + 2) * size_ + 64, std::byte{0xa5}) {
    auto base = reinterpret_cast<uintptr_t>(storage_.data());
    offset_ = ((base + 63) / 64 * 64 - base) + (misalign + 1) * size_;
  }
  void* data() { return storage_.data() + offset_; }
  bool guards_intact() const {
    for (size_t k = 0; k < size_; ++k) {
      if (storage_[offset_ - size_ + k] != std::byte{0xa5}) return false;
      if (storage_[offset_ + count_ * size_ + k] != std::byte{0xa5}) return false;
    }
    return true;
  }

 private:
  size_t size_, count_, misalign_;
  std::vector<std::byte> storage_;
  size_t offset_ = 0;
};

// Checks out against the reference, element by element. Floats: bitwise, except that a NaN
// reference only requires a NaN (payloads are compared between variants instead).
void expect_matches_reference(zrt_dtype_t dtype, ReduceOp op, const void* a, const void* b,
                              const void* out, size_t count, double a_scale, double b_scale,
                              const std::string& what) {
  std::vector<std::byte> expected((count + 1) * 8);
  int failures = 0;
  for (size_t i = 0; i < count && failures < 5; ++i) {
    ref_reduce(dtype, op, a, b, expected.data(), i, a_scale, b_scale);
    if (element_is_nan(dtype, expected.data(), i)) {
      if (!element_is_nan(dtype, out, i)) {
        ADD_FAILURE() << what << ": element " << i << " should be NaN, got "
                      << element_value(dtype, out, i);
        ++failures;
      }
      continue;
    }
    if (element_bits(dtype, expected.data(), i) != element_bits(dtype, out, i)) {
      ADD_FAILURE() << what << ": element " << i << " a=" << element_value(dtype, a, i)
                    << " b=" << element_value(dtype, b, i) << " expected "
                    << element_value(dtype, expected.data(), i) << " (bits 0x" << std::hex
                    << element_bits(dtype, expected.data(), i) << ") got "
                    << element_value(dtype, out, i) << " (bits 0x" << element_bits(dtype, out, i)
                    << std::dec << ")";
      ++failures;
    }
  }
}

void run_reduce_case(Variant variant, zrt_dtype_t dtype, ReduceOp op, size_t count, size_t misalign,
                     Alias alias, double a_scale, double b_scale, const KernelOptions& options) {
  const std::string what = describe(dtype, op, count, misalign, variant) +
                           " alias=" + std::to_string(static_cast<int>(alias)) +
                           " scales=" + std::to_string(a_scale) + "," + std::to_string(b_scale);
  std::mt19937_64 rng(count * 131 + static_cast<size_t>(dtype) * 7 + static_cast<size_t>(op));
  const size_t size = dtype_size(dtype);
  Buffer a(dtype, count, misalign), b(dtype, count, misalign), out(dtype, count, misalign);
  fill_random(dtype, a.data(), count, rng, 11, 3);
  fill_random(dtype, b.data(), count, rng, 13, 5);
  // Keep the inputs: in place, the kernel overwrites one of them.
  std::vector<std::byte> a_copy(count * size + 1), b_copy(count * size + 1);
  memcpy(a_copy.data(), a.data(), count * size);
  memcpy(b_copy.data(), b.data(), count * size);
  void* target = alias == Alias::kOutIsA   ? a.data()
                 : alias == Alias::kOutIsB ? b.data()
                                           : out.data();
  reduce_internal::kernel_table(variant)->reduce(dtype, op, a.data(), b.data(), target, count,
                                                 a_scale, b_scale, options);
  expect_matches_reference(dtype, op, a_copy.data(), b_copy.data(), target, count, a_scale, b_scale,
                           what);
  EXPECT_TRUE(a.guards_intact() && b.guards_intact() && out.guards_intact()) << what;
  if (alias != Alias::kOutIsA) {
    EXPECT_EQ(memcmp(a.data(), a_copy.data(), count * size), 0) << what << ": a modified";
  }
  if (alias != Alias::kOutIsB) {
    EXPECT_EQ(memcmp(b.data(), b_copy.data(), count * size), 0) << what << ": b modified";
  }
}

TEST(ReduceKernels, EveryDtypeOpVariantCountAndAlignmentMatchesReference) {
  for (Variant variant : supported_variants()) {
    for (zrt_dtype_t dtype : kAllDtypes) {
      for (ReduceOp op : kAllOps) {
        for (size_t count : kCounts) {
          for (size_t misalign : {0, 1}) {
            for (Alias alias : {Alias::kNone, Alias::kOutIsA, Alias::kOutIsB}) {
              run_reduce_case(variant, dtype, op, count, misalign, alias, 1.0, 1.0,
                              KernelOptions{});
            }
          }
        }
      }
    }
  }
}

// reduce_elements sums a few elements (up to 8, no scales) without the kernel table: bit for bit
// what the table gives, with infinities, NaNs, subnormals, signed zeros and integer overflow.
TEST(ReduceKernels, FewElementSumsMatchTheKernelTable) {
  std::mt19937_64 random(7);
  for (zrt_dtype_t dtype : {ZRT_F32, ZRT_F64, ZRT_I32, ZRT_I64}) {
    const size_t size = dtype_size(dtype);
    for (size_t count = 1; count <= 9; ++count) {
      for (int round = 0; round < 200; ++round) {
        std::vector<unsigned char> a(count * size), b(count * size);
        for (auto& byte : a) byte = static_cast<unsigned char>(random());
        for (auto& byte : b) byte = static_cast<unsigned char>(random());
        if (round % 4 == 0 && dtype == ZRT_F32) {  // specials where random bits rarely land
          const float specials[] = {INFINITY, -INFINITY, NAN, 1e-45f, -0.0f, 3.4e38f};
          for (size_t i = 0; i < count; ++i) {
            std::memcpy(&a[i * size], &specials[(round / 4 + i) % 6], size);
            std::memcpy(&b[i * size], &specials[(round / 4 + 2 * i + 1) % 6], size);
          }
        }
        std::vector<unsigned char> few(count * size), table(count * size);
        reduce_elements(dtype, ReduceOp::kSum, a.data(), b.data(), few.data(), count);
        reduce_internal::active_kernel_table().reduce(dtype, ReduceOp::kSum, a.data(), b.data(),
                                                      table.data(), count, 1.0, 1.0,
                                                      KernelOptions{});
        ASSERT_EQ(memcmp(few.data(), table.data(), few.size()), 0)
            << dtype_name(dtype) << " x " << count << ", round " << round;
      }
    }
  }
}

TEST(ReduceKernels, ScaledSumsMatchTheUnfusedDefinition) {
  const double scales[][2] = {
      {0.125, 0.125}, {1.0, 0.3}, {0.7, 1.0}, {-2.5, 1.0 / 3.0}, {1e-30, 1e30}};
  for (Variant variant : supported_variants()) {
    for (zrt_dtype_t dtype : kFloatDtypes) {
      for (const auto& s : scales) {
        for (size_t count : {size_t{17}, size_t{1023}, size_t{4097}}) {
          for (size_t misalign : {0, 1}) {
            run_reduce_case(variant, dtype, ReduceOp::kSum, count, misalign, Alias::kNone, s[0],
                            s[1], KernelOptions{});
            run_reduce_case(variant, dtype, ReduceOp::kSum, count, misalign, Alias::kOutIsB, s[0],
                            s[1], KernelOptions{});
          }
        }
      }
    }
  }
}

TEST(ReduceKernels, NonTemporalPathMatchesReference) {
  KernelOptions always_stream;
  always_stream.stream_min_bytes = 0;
  for (Variant variant : supported_variants()) {
    for (zrt_dtype_t dtype : kFloatDtypes) {
      for (ReduceOp op : kAllOps) {
        for (size_t misalign : {0, 1, 3}) {
          run_reduce_case(variant, dtype, op, 4097, misalign, Alias::kNone, 1.0, 1.0,
                          always_stream);
        }
      }
      run_reduce_case(variant, dtype, ReduceOp::kSum, 4097, 1, Alias::kNone, 0.5, 3.0,
                      always_stream);
    }
  }
}

// The heart of the determinism promise: each variant against the generic one, bitwise,
// including NaN payloads, on buffers dense with special values.
TEST(ReduceKernels, EveryVariantIsBitIdenticalToGeneric) {
  const size_t count = 4097;
  const auto* generic = reduce_internal::kernel_table(Variant::kGeneric);
  ASSERT_NE(generic, nullptr);
  for (Variant variant : supported_variants()) {
    const auto* table = reduce_internal::kernel_table(variant);
    for (zrt_dtype_t dtype : kAllDtypes) {
      const size_t size = dtype_size(dtype);
      std::mt19937_64 rng(static_cast<size_t>(dtype) + 99);
      std::vector<std::byte> a(count * size), b(count * size), want(count * size),
          got(count * size);
      fill_random(dtype, a.data(), count, rng, 3, 1);
      fill_random(dtype, b.data(), count, rng, 4, 1);
      for (ReduceOp op : kAllOps) {
        const bool floating = dtype_is_floating(dtype);
        for (double sa : {1.0, 0.25}) {
          if (sa != 1.0 && (!floating || op != ReduceOp::kSum)) continue;
          for (size_t stream_min : {SIZE_MAX, size_t{0}}) {
            KernelOptions options;
            options.stream_min_bytes = stream_min;
            const double sb = sa != 1.0 ? 1.0 / 3.0 : 1.0;
            generic->reduce(dtype, op, a.data(), b.data(), want.data(), count, sa, sb, options);
            table->reduce(dtype, op, a.data(), b.data(), got.data(), count, sa, sb, options);
            EXPECT_EQ(memcmp(want.data(), got.data(), count * size), 0)
                << describe(dtype, op, count, 0, variant) << " scale " << sa;
          }
        }
      }
      if (dtype_is_floating(dtype)) {
        generic->scale(dtype, a.data(), want.data(), count, 0.1, KernelOptions{});
        table->scale(dtype, a.data(), got.data(), count, 0.1, KernelOptions{});
        EXPECT_EQ(memcmp(want.data(), got.data(), count * size), 0)
            << "scale " << dtype_name(dtype) << " " << reduce_internal::variant_name(variant);
      }
      double want_sum = 0, got_sum = 0;
      bool want_bad = false, got_bad = false;
      generic->sum_squares(dtype, a.data(), count, &want_sum, &want_bad);
      table->sum_squares(dtype, a.data(), count, &got_sum, &got_bad);
      EXPECT_EQ(memcmp(&want_sum, &got_sum, sizeof(double)), 0) << dtype_name(dtype);
      EXPECT_EQ(want_bad, got_bad) << dtype_name(dtype);
    }
  }
}

TEST(ReduceKernels, IntegerSumsAndProductsWrap) {
  int8_t a8[] = {127, -128, 100}, b8[] = {1, -1, 3}, o8[3];
  reduce_elements(ZRT_I8, ReduceOp::kSum, a8, b8, o8, 3);
  EXPECT_EQ(o8[0], -128);
  EXPECT_EQ(o8[1], 127);
  reduce_elements(ZRT_I8, ReduceOp::kProd, a8, b8, o8, 3);
  EXPECT_EQ(o8[2], static_cast<int8_t>(300 - 256));
  uint8_t au[] = {255}, bu[] = {2}, ou[1];
  reduce_elements(ZRT_U8, ReduceOp::kSum, au, bu, ou, 1);
  EXPECT_EQ(ou[0], 1);
  int64_t a64[] = {INT64_MAX}, b64[] = {1}, o64[1];
  reduce_elements(ZRT_I64, ReduceOp::kSum, a64, b64, o64, 1);
  EXPECT_EQ(o64[0], INT64_MIN);
}

TEST(ReduceKernels, MinMaxPropagateNaN) {
  const float nan = std::nanf("");
  float a[] = {nan, 1.0f, nan, -0.0f}, b[] = {1.0f, nan, 2.0f, 0.0f}, out[4];
  for (Variant variant : supported_variants()) {
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      reduce_internal::kernel_table(variant)->reduce(ZRT_F32, op, a, b, out, 4, 1.0, 1.0,
                                                     KernelOptions{});
      EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]) && std::isnan(out[2]));
      EXPECT_FALSE(std::signbit(out[3])) << "min/max(-0, +0) is b";
    }
  }
}

TEST(ReduceKernels, ScaleMatchesReference) {
  for (Variant variant : supported_variants()) {
    for (zrt_dtype_t dtype : kFloatDtypes) {
      for (size_t count : kCounts) {
        for (size_t misalign : {0, 1}) {
          std::mt19937_64 rng(count);
          Buffer in(dtype, count, misalign), out(dtype, count, misalign);
          fill_random(dtype, in.data(), count, rng);
          const double factor = 0.1;
          reduce_internal::kernel_table(variant)->scale(dtype, in.data(), out.data(), count, factor,
                                                        KernelOptions{});
          // factor * x is the scaled sum with b_scale 0 only when x is finite; compare
          // directly instead.
          for (size_t i = 0; i < count; ++i) {
            double x = element_value(dtype, in.data(), i);
            double got = element_value(dtype, out.data(), i);
            double want = 0;
            if (dtype == ZRT_F64) {
              want = factor * x;
            } else {
              float p = static_cast<float>(factor) * static_cast<float>(x);
              want = dtype == ZRT_F32   ? p
                     : dtype == ZRT_F16 ? ref_f16_to_f32(ref_f32_to_f16(p))
                                        : ref_bf16_to_f32(ref_f32_to_bf16(p));
            }
            if (std::isnan(want)) {
              ASSERT_TRUE(std::isnan(got))
                  << describe(dtype, ReduceOp::kProd, count, misalign, variant) << " i=" << i;
            } else {
              ASSERT_EQ(want, got)
                  << describe(dtype, ReduceOp::kProd, count, misalign, variant) << " i=" << i;
              ASSERT_EQ(std::signbit(want), std::signbit(got));
            }
          }
          EXPECT_TRUE(in.guards_intact() && out.guards_intact());
        }
      }
    }
  }
}

TEST(SumSquares, FixedOrderAndNonfinite) {
  for (Variant variant : supported_variants()) {
    for (zrt_dtype_t dtype : kAllDtypes) {
      for (size_t count :
           {size_t{0}, size_t{1}, size_t{1023}, size_t{1024}, size_t{1025}, size_t{4097}}) {
        std::mt19937_64 rng(count + 5);
        Buffer in(dtype, count, 1);
        fill_random(dtype, in.data(), count, rng, 0, 0);  // no specials: all finite
        double want = 0;
        for (size_t base = 0; base < count; base += 1024) {
          double block = 0;
          for (size_t i = base; i < count && i < base + 1024; ++i) {
            const double x = element_value(dtype, in.data(), i);
            const double square = x * x;
            block += square;
          }
          want += block;
        }
        double got = -1;
        bool nonfinite = true;
        reduce_internal::kernel_table(variant)->sum_squares(dtype, in.data(), count, &got,
                                                            &nonfinite);
        EXPECT_EQ(memcmp(&want, &got, sizeof(double)), 0)
            << dtype_name(dtype) << " count " << count << " want " << want << " got " << got;
        EXPECT_FALSE(nonfinite);
      }
    }
    for (zrt_dtype_t dtype : kFloatDtypes) {
      std::mt19937_64 rng(3);
      Buffer in(dtype, 100, 0);
      fill_random(dtype, in.data(), 100, rng, 0, 0);
      std::vector<std::byte> bad(8);
      // One inf (f16 also reaches inf through its own range).
      const uint64_t inf_bits = dtype == ZRT_F32   ? 0x7f800000u
                                : dtype == ZRT_F64 ? 0x7ff0000000000000u
                                : dtype == ZRT_F16 ? 0x7c00u
                                                   : 0x7f80u;
      memcpy(static_cast<char*>(in.data()) + 57 * dtype_size(dtype), &inf_bits, dtype_size(dtype));
      double sum = 0;
      bool nonfinite = false;
      reduce_internal::kernel_table(variant)->sum_squares(dtype, in.data(), 100, &sum, &nonfinite);
      EXPECT_TRUE(nonfinite) << dtype_name(dtype);
    }
  }
}

}  // namespace
}  // namespace zrt::testing
