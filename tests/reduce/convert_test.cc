// convert_elements and the scalar f16/bf16 helpers: RNE, NaN stays NaN, overflow to inf,
// subnormals, ties; every variant against the reference and against the generic variant.
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

constexpr zrt_dtype_t kFloatDtypes[] = {ZRT_F32, ZRT_F64, ZRT_F16, ZRT_BF16};

float float_of(uint32_t bits) {
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

// f32 inputs that probe every rounding corner of f16 and bf16, plus random bit patterns.
std::vector<float> probe_floats() {
  std::vector<float> values;
  for (uint32_t bits :
       {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffa00001u,
        0x00000001u, 0x007fffffu, 0x7f7fffffu, 0xff7fffffu, 0x3f808000u, 0x3f818000u, 0x3f808001u,
        0x3f807fffu, 0x3f801000u, 0x3f803000u, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0xc77ff000u,
        0x33000000u, 0x33000001u, 0x33800000u, 0x33c00000u, 0x34200000u, 0x387fc000u, 0x387fe000u,
        0x38800000u, 0x7f7f8000u, 0x7f7f7fffu, 0x00008000u, 0x00018000u}) {
    values.push_back(float_of(bits));
  }
  std::mt19937_64 rng(42);
  for (int i = 0; i < 20000; ++i) values.push_back(float_of(static_cast<uint32_t>(rng())));
  // Values in f16's range, where its rounding is busiest.
  for (int i = 0; i < 20000; ++i) {
    values.push_back(float_of(0x33000000u + static_cast<uint32_t>(rng() % 0x14800000u)));
  }
  return values;
}

TEST(ScalarHalf, F16ToF32IsExactForAllPatterns) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float got = f16_to_f32(static_cast<uint16_t>(h));
    const float want = ref_f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << h;
    } else {
      ASSERT_EQ(memcmp(&got, &want, 4), 0) << std::hex << h;
    }
    // Every f16 survives the round trip (NaNs as NaNs).
    const uint16_t back = f32_to_f16(got);
    if (!std::isnan(want)) {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(ScalarHalf, F32ToHalfRoundsToNearestEven) {
  for (float f : probe_floats()) {
    const uint16_t h = f32_to_f16(f), want_h = ref_f32_to_f16(f);
    const uint16_t b = f32_to_bf16(f), want_b = ref_f32_to_bf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(h)) && std::isnan(bf16_to_f32(b))) << f;
      EXPECT_EQ(h & 0x8000, want_h & 0x8000);
      EXPECT_EQ(b & 0x8000, want_b & 0x8000);
      EXPECT_NE(h & 0x0200, 0) << "quiet";
      EXPECT_NE(b & 0x0040, 0) << "quiet";
    } else {
      ASSERT_EQ(h, want_h) << std::hexfloat << f;
      ASSERT_EQ(b, want_b) << std::hexfloat << f;
    }
  }
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00) << "tie above max rounds to inf";
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000) << "tie to even (zero)";
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002) << "1.5 * 2^-24 ties to 2";
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808000u)), 0x3f80) << "tie to even (down)";
  EXPECT_EQ(f32_to_bf16(float_of(0x3f818000u)), 0x3f82) << "tie to even (up)";
  EXPECT_EQ(f32_to_bf16(float_of(0x7f7fffffu)), 0x7f80) << "FLT_MAX overflows bf16";
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
}

// Runs convert from -> to in one variant and checks every element against the reference
// conversion of its exact value.
void check_convert(Variant variant, zrt_dtype_t from, zrt_dtype_t to, const void* in, size_t count,
                   const KernelOptions& options, size_t misalign) {
  const size_t out_size = dtype_size(to);
  std::vector<std::byte> storage((count + misalign + 16) * out_size + 64);
  auto base = reinterpret_cast<uintptr_t>(storage.data());
  void* out = storage.data() + ((base + 63) / 64 * 64 - base) + misalign * out_size;
  reduce_internal::kernel_table(variant)->convert(from, in, to, out, count, options);
  int failures = 0;
  for (size_t i = 0; i < count && failures < 5; ++i) {
    const uint64_t in_bits = element_bits(from, in, i);
    double x = element_value(from, in, i);
    uint64_t want = 0;
    switch (to) {
      case ZRT_F32: {
        float f = static_cast<float>(x);
        memcpy(&want, &f, 4);
        break;
      }
      case ZRT_F64:
        memcpy(&want, &x, 8);
        break;
      case ZRT_F16:
        want = ref_f64_to_f16(x);
        break;
      case ZRT_BF16:
        want = ref_f64_to_bf16(x);
        break;
      default:
        break;
    }
    const bool nan_in = element_is_nan(from, in, i);
    if (nan_in) {
      if (!element_is_nan(to, out, i)) {
        ADD_FAILURE() << "NaN must stay NaN: " << dtype_name(from) << "->" << dtype_name(to)
                      << " bits 0x" << std::hex << in_bits;
        ++failures;
      }
    } else if (element_bits(to, out, i) != want) {
      ADD_FAILURE() << dtype_name(from) << "->" << dtype_name(to) << " "
                    << reduce_internal::variant_name(variant) << " element " << i << " in 0x"
                    << std::hex << in_bits << " (" << std::hexfloat << x << ") want 0x" << want
                    << " got 0x" << element_bits(to, out, i);
      ++failures;
    }
  }
}

TEST(ConvertElements, EveryPairEveryVariantMatchesReference) {
  std::vector<float> probes = probe_floats();
  for (Variant variant : supported_variants()) {
    for (zrt_dtype_t from : kFloatDtypes) {
      // Inputs: the probes as f32, as f64 (plus f64-only corners), or all half patterns.
      std::vector<std::byte> in;
      size_t count = 0;
      if (from == ZRT_F32) {
        count = probes.size();
        in.resize(count * 4);
        memcpy(in.data(), probes.data(), in.size());
      } else if (from == ZRT_F64) {
        std::vector<double> values(probes.begin(), probes.end());
        std::mt19937_64 rng(9);
        for (int i = 0; i < 20000; ++i) {
          // Just off f16/bf16 ties by less than an f32 ulp: the double-rounding trap.
          double tie = static_cast<double>(float_of(0x3f808000u + (rng() % 64) * 0x10000u));
          values.push_back(tie * (1.0 + std::ldexp(static_cast<double>(rng() % 3) - 1, -40)));
          values.push_back(
              std::ldexp(1.0 + std::ldexp(1.0, -11), -14 - static_cast<int>(rng() % 12)) *
              (1.0 + std::ldexp(1.0, -45)));
        }
        values.push_back(1e300);
        values.push_back(-1e-300);
        count = values.size();
        in.resize(count * 8);
        memcpy(in.data(), values.data(), in.size());
      } else {
        count = 65536;
        in.resize(count * 2);
        for (uint32_t h = 0; h < 65536; ++h) {
          uint16_t v = static_cast<uint16_t>(h);
          memcpy(in.data() + h * 2, &v, 2);
        }
      }
      for (zrt_dtype_t to : kFloatDtypes) {
        for (size_t misalign : {0, 1}) {
          check_convert(variant, from, to, in.data(), count, KernelOptions{}, misalign);
          for (size_t small : {size_t{0}, size_t{1}, size_t{7}, size_t{17}}) {
            check_convert(variant, from, to, in.data(), small, KernelOptions{}, misalign);
          }
        }
        KernelOptions always_stream;
        always_stream.stream_min_bytes = 0;
        check_convert(variant, from, to, in.data(), count, always_stream, 3);
      }
    }
  }
}

TEST(ConvertElements, EveryVariantIsBitIdenticalToGenericIncludingNaNPayloads) {
  std::vector<float> probes = probe_floats();
  std::vector<uint16_t> halves(65536);
  for (uint32_t h = 0; h < 65536; ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<double> doubles(probes.begin(), probes.end());
  const auto* generic = reduce_internal::kernel_table(Variant::kGeneric);
  for (Variant variant : supported_variants()) {
    const auto* table = reduce_internal::kernel_table(variant);
    for (zrt_dtype_t from : kFloatDtypes) {
      const void* in = from == ZRT_F32   ? static_cast<const void*>(probes.data())
                       : from == ZRT_F64 ? static_cast<const void*>(doubles.data())
                                         : static_cast<const void*>(halves.data());
      const size_t count = (from == ZRT_F16 || from == ZRT_BF16) ? halves.size() : probes.size();
      for (zrt_dtype_t to : kFloatDtypes) {
        std::vector<std::byte> want(count * 8), got(count * 8);
        generic->convert(from, in, to, want.data(), count, KernelOptions{});
        table->convert(from, in, to, got.data(), count, KernelOptions{});
        EXPECT_EQ(memcmp(want.data(), got.data(), count * dtype_size(to)), 0)
            << dtype_name(from) << "->" << dtype_name(to) << " "
            << reduce_internal::variant_name(variant);
      }
    }
  }
}

TEST(ConvertElements, SameDtypeIsACopyAndInPlaceIsAllowed) {
  std::vector<float> values = {1.5f, -2.0f, std::nanf("")};
  std::vector<float> out(3);
  convert_elements(ZRT_F32, values.data(), ZRT_F32, out.data(), 3);
  EXPECT_EQ(memcmp(values.data(), out.data(), 12), 0);
  convert_elements(ZRT_F32, values.data(), ZRT_F32, values.data(), 3);
  EXPECT_EQ(values[0], 1.5f);
}

}  // namespace
}  // namespace zrt::testing
