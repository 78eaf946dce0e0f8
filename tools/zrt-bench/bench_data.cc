#include "tools/zrt-bench/bench_data.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace zrt::bench {
namespace {

uint16_t float_to_half(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  uint32_t sign = (f >> 16) & 0x8000u;
  int32_t exponent = static_cast<int32_t>((f >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = f & 0x7fffffu;
  if (((f >> 23) & 0xff) == 0xff)
    return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0));
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exponent);
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into exponent
  return static_cast<uint16_t>(half);
}

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t f;
  if (exponent == 0) {
    if (mantissa == 0) {
      f = sign;
    } else {
      int e = -1;
      do {
        ++e;
        mantissa <<= 1;
      } while ((mantissa & 0x400u) == 0);
      f = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 31) {
    f = sign | 0x7f800000u | (mantissa << 13);
  } else {
    f = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

uint16_t float_to_bf16(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // NaN
  f += 0x7fffu + ((f >> 16) & 1u);
  return static_cast<uint16_t>(f >> 16);
}

float bf16_to_float(uint16_t b) {
  uint32_t f = static_cast<uint32_t>(b) << 16;
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

template <typename T>
void store_as(void* dst, uint64_t index, T value) {
  std::memcpy(static_cast<char*>(dst) + index * sizeof(T), &value, sizeof(T));
}
template <typename T>
T load_as(const void* src, uint64_t index) {
  T value;
  std::memcpy(&value, static_cast<const char*>(src) + index * sizeof(T), sizeof(T));
  return value;
}

// Integer results are compared modulo 2^bits: the library's kernels wrap like C++ conversions.
int64_t wrap(zrt_dtype_t dtype, int64_t v) {
  switch (dtype) {
    case ZRT_I8:
      return static_cast<int8_t>(v);
    case ZRT_U8:
      return static_cast<uint8_t>(v);
    case ZRT_I32:
      return static_cast<int32_t>(v);
    default:
      return v;
  }
}

// The expected reduction of element `index` over all ranks' inputs.
double reduce_expected(zrt_dtype_t dtype, zrt_op_t op, int ranks, uint64_t index) {
  if (!dtype_is_float(dtype)) {
    uint64_t acc = static_cast<uint64_t>(static_cast<int64_t>(input_value(dtype, op, 0, index)));
    for (int r = 1; r < ranks; ++r) {
      int64_t v = static_cast<int64_t>(input_value(dtype, op, r, index));
      int64_t a = wrap(dtype, static_cast<int64_t>(acc));
      switch (op) {
        case ZRT_PROD:
          acc = acc * static_cast<uint64_t>(v);
          break;
        case ZRT_MIN:
          acc = static_cast<uint64_t>(std::min(a, v));
          break;
        case ZRT_MAX:
          acc = static_cast<uint64_t>(std::max(a, v));
          break;
        default:
          acc = acc + static_cast<uint64_t>(v);
          break;
      }
    }
    return static_cast<double>(wrap(dtype, static_cast<int64_t>(acc)));
  }
  double acc = input_value(dtype, op, 0, index);
  for (int r = 1; r < ranks; ++r) {
    double v = input_value(dtype, op, r, index);
    switch (op) {
      case ZRT_PROD:
        acc *= v;
        break;
      case ZRT_MIN:
        acc = std::min(acc, v);
        break;
      case ZRT_MAX:
        acc = std::max(acc, v);
        break;
      default:
        acc += v;
        break;
    }
  }
  if (op == ZRT_AVG) acc /= ranks;
  return acc;
}

bool matches(zrt_dtype_t dtype, double expected, double got) {
  if (!dtype_is_float(dtype)) return expected == got;
  // Exact integers stay exact; only avg rounds. Allow a couple of ulps of the stored type.
  double eps = dtype == ZRT_F16    ? 1.0 / 1024
               : dtype == ZRT_BF16 ? 1.0 / 128
               : dtype == ZRT_F32  ? 1e-6
                                   : 1e-12;
  return std::fabs(expected - got) <= 2 * eps * std::max(1.0, std::fabs(expected));
}

}  // namespace

double input_value(zrt_dtype_t dtype, zrt_op_t op, int rank, uint64_t index) {
  const uint64_t r = static_cast<uint64_t>(rank);
  if (op == ZRT_PROD) {
    // Mostly ones with some -1 and 2: products stay small yet a wrong factor shows. Half types
    // get no 2s, whose powers would leave their exact range for many ranks.
    static const double kWide[] = {2, -1, 1, 1}, kNarrow[] = {-1, 1, 1, 1};
    const double* values = (dtype == ZRT_F16 || dtype == ZRT_BF16) ? kNarrow : kWide;
    return values[(index + r) % 4];
  }
  double v = static_cast<double>((index * 13 + r * 7) % 11);
  return dtype == ZRT_U8 ? v : v - 5;
}

void store_value(zrt_dtype_t dtype, double value, void* dst, uint64_t index) {
  switch (dtype) {
    case ZRT_F32:
      store_as<float>(dst, index, static_cast<float>(value));
      break;
    case ZRT_F64:
      store_as<double>(dst, index, value);
      break;
    case ZRT_F16:
      store_as<uint16_t>(dst, index, float_to_half(static_cast<float>(value)));
      break;
    case ZRT_BF16:
      store_as<uint16_t>(dst, index, float_to_bf16(static_cast<float>(value)));
      break;
    case ZRT_I8:
      store_as<int8_t>(dst, index, static_cast<int8_t>(static_cast<int64_t>(value)));
      break;
    case ZRT_U8:
      store_as<uint8_t>(dst, index, static_cast<uint8_t>(static_cast<int64_t>(value)));
      break;
    case ZRT_I32:
      store_as<int32_t>(dst, index, static_cast<int32_t>(static_cast<int64_t>(value)));
      break;
    case ZRT_I64:
      store_as<int64_t>(dst, index, static_cast<int64_t>(value));
      break;
    default:
      break;
  }
}

double load_value(zrt_dtype_t dtype, const void* src, uint64_t index) {
  switch (dtype) {
    case ZRT_F32:
      return load_as<float>(src, index);
    case ZRT_F64:
      return load_as<double>(src, index);
    case ZRT_F16:
      return half_to_float(load_as<uint16_t>(src, index));
    case ZRT_BF16:
      return bf16_to_float(load_as<uint16_t>(src, index));
    case ZRT_I8:
      return load_as<int8_t>(src, index);
    case ZRT_U8:
      return load_as<uint8_t>(src, index);
    case ZRT_I32:
      return load_as<int32_t>(src, index);
    case ZRT_I64:
      return static_cast<double>(load_as<int64_t>(src, index));
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}

void fill_input(zrt_dtype_t dtype, zrt_op_t op, int rank, uint64_t first_index, uint64_t count,
                void* dst) {
  for (uint64_t i = 0; i < count; ++i) {
    store_value(dtype, input_value(dtype, op, rank, first_index + i), dst, i);
  }
}

void fill_poison(zrt_dtype_t dtype, uint64_t count, void* dst) {
  // 97 is outside every input range and not a product or sum any check expects for small N.
  for (uint64_t i = 0; i < count; ++i) store_value(dtype, 97, dst, i);
}

int64_t count_wrong(Coll coll, zrt_dtype_t dtype, zrt_op_t op, int rank, int ranks, int root,
                    uint64_t count, const void* result) {
  int64_t wrong = 0;
  switch (coll) {
    case Coll::kReduceScatter:
      for (uint64_t i = 0; i < count; ++i) {
        uint64_t global = static_cast<uint64_t>(rank) * count + i;
        wrong += !matches(dtype, reduce_expected(dtype, op, ranks, global),
                          load_value(dtype, result, i));
      }
      break;
    case Coll::kAllGather:
      for (int r = 0; r < ranks; ++r) {
        for (uint64_t i = 0; i < count; ++i) {
          uint64_t at = static_cast<uint64_t>(r) * count + i;
          wrong += !matches(dtype, input_value(dtype, op, r, i), load_value(dtype, result, at));
        }
      }
      break;
    case Coll::kAllReduce:
      for (uint64_t i = 0; i < count; ++i) {
        wrong +=
            !matches(dtype, reduce_expected(dtype, op, ranks, i), load_value(dtype, result, i));
      }
      break;
    case Coll::kBroadcast:
      for (uint64_t i = 0; i < count; ++i) {
        wrong += !matches(dtype, input_value(dtype, op, root, i), load_value(dtype, result, i));
      }
      break;
    case Coll::kReduce:
      if (rank != root) break;
      for (uint64_t i = 0; i < count; ++i) {
        wrong +=
            !matches(dtype, reduce_expected(dtype, op, ranks, i), load_value(dtype, result, i));
      }
      break;
  }
  return wrong;
}

}  // namespace zrt::bench
