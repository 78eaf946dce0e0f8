#include "tests/reduce/reference.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "lib/core/dtype.h"

namespace zrt::testing {
namespace {

using reduce_internal::Variant;

template <typename To, typename From>
To bits_cast(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  memcpy(&to, &from, sizeof(to));
  return to;
}

// Magnitude of a half-format bit pattern (sign bit clear). The infinity pattern is given the
// value the next binade would start at, so that "nearest, ties to even" also yields IEEE's
// overflow rule (inf from max + half an ulp up).
long double bf16_magnitude(uint16_t h) {
  if (h == 0x7f80) return std::ldexp(1.0L, 128);
  return static_cast<long double>(bits_cast<float>(static_cast<uint32_t>(h) << 16));
}
long double f16_magnitude(uint16_t h) {
  if (h == 0x7c00) return 65536.0L;
  int exponent = (h >> 10) & 0x1f;
  int mantissa = h & 0x3ff;
  if (exponent == 0) return std::ldexp(static_cast<long double>(mantissa), -24);
  return std::ldexp(static_cast<long double>(1024 + mantissa), exponent - 25);
}

// Nearest pattern in [0, inf] to |x| by binary search on the (monotonic) magnitudes.
uint16_t round_to_half(long double x, long double (*magnitude)(uint16_t), uint16_t inf_bits,
                       uint16_t quiet_nan) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | quiet_nan;
  const long double ax = std::fabs(x);
  if (ax >= magnitude(inf_bits)) return sign | inf_bits;
  uint16_t lo = 0, hi = inf_bits;  // magnitude(lo) <= ax < magnitude(hi)
  while (hi - lo > 1) {
    uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    if (magnitude(mid) <= ax) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const long double below = ax - magnitude(lo);
  const long double above = magnitude(hi) - ax;
  uint16_t pick = below < above ? lo : above < below ? hi : ((lo & 1) == 0 ? lo : hi);
  return sign | pick;
}

const uint32_t kF32Specials[] = {
    0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffc00123,
    0x00000001, 0x807fffff, 0x7f7fffff, 0xff7fffff, 0x3f808000, 0x3f818000, 0x3f801000,
    0x477ff000, 0x477fefff, 0x33000000, 0x33c00000, 0x387fe000, 0x38800000, 0x00400000};
const uint64_t kF64Specials[] = {
    0x0000000000000000, 0x8000000000000000, 0x7ff0000000000000, 0xfff0000000000000,
    0x7ff8000000000000, 0x7ff0000000000001, 0xfff8000000000abc, 0x0000000000000001,
    0x7fefffffffffffff, 0x3ff0100000000000, 0x3ff0100000000001, 0x3ff0080000000000,
    0x47efffffe0000000, 0x36a0000000000000, 0x40effe0000000000, 0x40effe0000000001};
const uint16_t kF16Specials[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7d00, 0xfe01,
                                 0x0001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c01};
const uint16_t kBf16Specials[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc1,
                                  0x0001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x3f81};

template <typename T, size_t N>
T pick(const T (&values)[N], std::mt19937_64& rng) {
  return values[rng() % N];
}

float random_float(std::mt19937_64& rng) {
  std::uniform_real_distribution<float> unit(-4.0f, 4.0f);
  return std::ldexp(unit(rng), static_cast<int>(rng() % 7) - 3);
}

}  // namespace

std::vector<Variant> supported_variants() {
  std::vector<Variant> variants;
  for (Variant v : {Variant::kGeneric, Variant::kAvx2, Variant::kAvx512}) {
    if (reduce_internal::variant_supported(v)) variants.push_back(v);
  }
  return variants;
}

uint16_t ref_f32_to_bf16(float f) {
  return round_to_half(f, bf16_magnitude, 0x7f80, 0x7fc0);
}
uint16_t ref_f64_to_bf16(double d) {
  return round_to_half(d, bf16_magnitude, 0x7f80, 0x7fc0);
}
uint16_t ref_f32_to_f16(float f) {
  return round_to_half(f, f16_magnitude, 0x7c00, 0x7e00);
}
uint16_t ref_f64_to_f16(double d) {
  return round_to_half(d, f16_magnitude, 0x7c00, 0x7e00);
}

float ref_f16_to_f32(uint16_t h) {
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  const uint16_t magnitude = h & 0x7fff;
  if (magnitude > 0x7c00) return std::copysign(std::nanf(""), sign);
  if (magnitude == 0x7c00) return sign * INFINITY;
  return sign * static_cast<float>(f16_magnitude(magnitude));
}
float ref_bf16_to_f32(uint16_t h) {
  return bits_cast<float>(static_cast<uint32_t>(h) << 16);
}

double element_value(zrt_dtype_t dtype, const void* buffer, size_t i) {
  switch (dtype) {
    case ZRT_F32:
      return static_cast<const float*>(buffer)[i];
    case ZRT_F64:
      return static_cast<const double*>(buffer)[i];
    case ZRT_F16:
      return ref_f16_to_f32(static_cast<const uint16_t*>(buffer)[i]);
    case ZRT_BF16:
      return ref_bf16_to_f32(static_cast<const uint16_t*>(buffer)[i]);
    case ZRT_I8:
      return static_cast<const int8_t*>(buffer)[i];
    case ZRT_U8:
      return static_cast<const uint8_t*>(buffer)[i];
    case ZRT_I32:
      return static_cast<const int32_t*>(buffer)[i];
    case ZRT_I64:
      return static_cast<double>(static_cast<const int64_t*>(buffer)[i]);
    default:
      return 0;
  }
}

uint64_t element_bits(zrt_dtype_t dtype, const void* buffer, size_t i) {
  uint64_t bits = 0;
  const size_t size = dtype_size(dtype);
  memcpy(&bits, static_cast<const char*>(buffer) + i * size, size);
  return bits;
}

bool element_is_nan(zrt_dtype_t dtype, const void* buffer, size_t i) {
  return dtype_is_floating(dtype) && std::isnan(element_value(dtype, buffer, i));
}

namespace {

// 128-bit intermediates make the wrap-around explicit (__extension__: not ISO C++).
__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;

template <typename I>
I wrap(Int128 value) {
  using U = std::make_unsigned_t<I>;
  return static_cast<I>(static_cast<U>(static_cast<UInt128>(value)));
}

template <typename I>
void ref_integer(ReduceOp op, const void* a, const void* b, void* out, size_t i) {
  const Int128 x = static_cast<const I*>(a)[i];
  const Int128 y = static_cast<const I*>(b)[i];
  I r = 0;
  switch (op) {
    case ReduceOp::kSum:
      r = wrap<I>(x + y);
      break;
    case ReduceOp::kProd:
      r = wrap<I>(x * y);
      break;
    case ReduceOp::kMin:
      r = static_cast<I>(x < y ? x : y);
      break;
    case ReduceOp::kMax:
      r = static_cast<I>(x > y ? x : y);
      break;
  }
  static_cast<I*>(out)[i] = r;
}

template <typename F>
F ref_float_op(ReduceOp op, F x, F y, F sa, F sb) {
  switch (op) {
    case ReduceOp::kSum: {
      const F p = sa * x;  // separate statements: each product rounds on its own
      const F q = sb * y;
      return p + q;
    }
    case ReduceOp::kProd:
      return x * y;
    case ReduceOp::kMin:
      if (std::isnan(x)) return x;
      if (std::isnan(y)) return y;
      return x < y ? x : y;
    case ReduceOp::kMax:
      if (std::isnan(x)) return x;
      if (std::isnan(y)) return y;
      return x > y ? x : y;
  }
  return 0;
}

}  // namespace

void ref_reduce(zrt_dtype_t dtype, ReduceOp op, const void* a, const void* b, void* out, size_t i,
                double a_scale, double b_scale) {
  const float sa = static_cast<float>(a_scale);
  const float sb = static_cast<float>(b_scale);
  switch (dtype) {
    case ZRT_F64:
      static_cast<double*>(out)[i] = ref_float_op<double>(
          op, static_cast<const double*>(a)[i], static_cast<const double*>(b)[i], a_scale, b_scale);
      return;
    case ZRT_F32:
      static_cast<float*>(out)[i] = ref_float_op<float>(op, static_cast<const float*>(a)[i],
                                                        static_cast<const float*>(b)[i], sa, sb);
      return;
    case ZRT_F16: {
      float r = ref_float_op<float>(op, static_cast<float>(element_value(dtype, a, i)),
                                    static_cast<float>(element_value(dtype, b, i)), sa, sb);
      static_cast<uint16_t*>(out)[i] = ref_f32_to_f16(r);
      return;
    }
    case ZRT_BF16: {
      float r = ref_float_op<float>(op, static_cast<float>(element_value(dtype, a, i)),
                                    static_cast<float>(element_value(dtype, b, i)), sa, sb);
      static_cast<uint16_t*>(out)[i] = ref_f32_to_bf16(r);
      return;
    }
    case ZRT_I8:
      return ref_integer<int8_t>(op, a, b, out, i);
    case ZRT_U8:
      return ref_integer<uint8_t>(op, a, b, out, i);
    case ZRT_I32:
      return ref_integer<int32_t>(op, a, b, out, i);
    case ZRT_I64:
      return ref_integer<int64_t>(op, a, b, out, i);
    default:
      return;
  }
}

void fill_random(zrt_dtype_t dtype, void* buffer, size_t count, std::mt19937_64& rng,
                 size_t special_every, size_t special_phase) {
  for (size_t i = 0; i < count; ++i) {
    const bool special = special_every != 0 && i % special_every == special_phase;
    switch (dtype) {
      case ZRT_F32:
        static_cast<float*>(buffer)[i] =
            special ? bits_cast<float>(pick(kF32Specials, rng)) : random_float(rng);
        break;
      case ZRT_F64:
        static_cast<double*>(buffer)[i] =
            special ? bits_cast<double>(pick(kF64Specials, rng))
                    : static_cast<double>(random_float(rng)) * (1.0 + std::ldexp(1.0, -40));
        break;
      case ZRT_F16:
        static_cast<uint16_t*>(buffer)[i] =
            special ? pick(kF16Specials, rng) : ref_f32_to_f16(random_float(rng));
        break;
      case ZRT_BF16:
        static_cast<uint16_t*>(buffer)[i] =
            special ? pick(kBf16Specials, rng) : ref_f32_to_bf16(random_float(rng));
        break;
      default: {
        const uint64_t bits = rng();
        memcpy(static_cast<char*>(buffer) + i * dtype_size(dtype), &bits, dtype_size(dtype));
        break;
      }
    }
  }
}

std::string describe(zrt_dtype_t dtype, ReduceOp op, size_t count, size_t misalign,
                     Variant variant) {
  static const char* const kOps[] = {"sum", "prod", "min", "max"};
  return fmt::format("{} {} count={} misalign={} variant={}", dtype_name(dtype),
                     kOps[static_cast<int>(op)], count, misalign,
                     reduce_internal::variant_name(variant));
}

}  // namespace zrt::testing
