// Typed element access for tests: read/write any zrt dtype as double, the inputs each rank
// contributes, and the serial f64 reference they reduce to.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/reduce/reduce_kernels.h"
#include "lib/core/dtype.h"

namespace zrt::testing {

inline double load(zrt_dtype_t dtype, const void* base, size_t i) {
  const char* p = static_cast<const char*>(base) + i * dtype_size(dtype);
  switch (dtype) {
    case ZRT_F32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case ZRT_F64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case ZRT_F16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return f16_to_f32(v);
    }
    case ZRT_BF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return bf16_to_f32(v);
    }
    case ZRT_I8:
      return static_cast<int8_t>(*p);
    case ZRT_U8:
      return static_cast<uint8_t>(*p);
    case ZRT_I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case ZRT_I64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    default:
      return 0;
  }
}

inline void store(zrt_dtype_t dtype, void* base, size_t i, double value) {
  char* p = static_cast<char*>(base) + i * dtype_size(dtype);
  switch (dtype) {
    case ZRT_F32: {
      float v = static_cast<float>(value);
      std::memcpy(p, &v, 4);
      break;
    }
    case ZRT_F64:
      std::memcpy(p, &value, 8);
      break;
    case ZRT_F16: {
      uint16_t v = f32_to_f16(static_cast<float>(value));
      std::memcpy(p, &v, 2);
      break;
    }
    case ZRT_BF16: {
      uint16_t v = f32_to_bf16(static_cast<float>(value));
      std::memcpy(p, &v, 2);
      break;
    }
    case ZRT_I8:
      *p = static_cast<char>(static_cast<int8_t>(value));
      break;
    case ZRT_U8:
      *p = static_cast<char>(static_cast<uint8_t>(value));
      break;
    case ZRT_I32: {
      int32_t v = static_cast<int32_t>(value);
      std::memcpy(p, &v, 4);
      break;
    }
    case ZRT_I64: {
      int64_t v = static_cast<int64_t>(value);
      std::memcpy(p, &v, 8);
      break;
    }
    default:
      break;
  }
}

// Rank r's element i. Small values so that integer sums of 8 ranks fit i8/u8 and float sums are
// exact; products are of 1s and a few 2s (and -1s for signed types) so they never overflow.
inline double input_value(zrt_dtype_t dtype, zrt_op_t op, int rank, int size, size_t i) {
  if (op == ZRT_PROD) {
    if (i % 5 == 0 && static_cast<int>((i / 5) % size) == rank) return 2;
    if (dtype != ZRT_U8 && i % 7 == 1 && rank == 0) return -1;
    return 1;
  }
  double v = static_cast<double>(static_cast<int64_t>((i * 7 + rank * 13 + i / 11) % 15) - 7);
  if (dtype == ZRT_U8) v += 7;
  if (dtype_is_floating(dtype)) v *= 0.5;
  return v;
}

inline double combine(zrt_op_t op, double a, double b) {
  switch (op) {
    case ZRT_MIN:
      return std::fmin(a, b);
    case ZRT_MAX:
      return std::fmax(a, b);
    case ZRT_PROD:
      return a * b;
    default:
      return a + b;
  }
}

// The serial reference of element i over all ranks, in f64.
inline double reference(zrt_dtype_t dtype, zrt_op_t op, int size, size_t i) {
  double acc = input_value(dtype, op, 0, size, i);
  for (int r = 1; r < size; ++r) acc = combine(op, acc, input_value(dtype, op, r, size, i));
  if (op == ZRT_AVG) acc /= size;
  return acc;
}

// Allowed |result - reference|: exact except for avg, whose 1/N pre-multiplication rounds.
inline double tolerance(zrt_dtype_t dtype, zrt_op_t op) {
  if (op != ZRT_AVG) return 0;
  switch (dtype) {
    case ZRT_F64:
      return 1e-12;
    case ZRT_F32:
      return 1e-5;
    case ZRT_F16:
      return 2e-2;
    case ZRT_BF16:
      return 1e-1;
    default:
      return 0;
  }
}

inline uint64_t fnv1a(const void* data, size_t bytes, uint64_t hash = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

}  // namespace zrt::testing
