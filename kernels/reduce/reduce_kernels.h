// Elementwise reduction and conversion kernels on host memory, vectorised with runtime CPU
// dispatch (AVX-512 / AVX2+F16C+FMA where the CPU has them, portable C++ elsewhere). Every
// collective's arithmetic happens here. No kernel allocates, and none is compiled with
// -march=native: the dispatch picks the variant once, from cpuid, at first use.
//
// Rounding: f16 and bf16 are widened to f32, combined, and rounded back (round to nearest even)
// once per call. Results depend only on the inputs and the call sequence, never on the variant
// chosen, so every rank and every run computes bit-identical results.
//
// Defined edge cases (identical in every variant):
//  - integer sums and products wrap around (two's complement, modulo 2^bits); min/max are exact;
//  - float min/max propagate NaN: if a[i] is NaN the result is a[i], else if b[i] is NaN it is
//    b[i]; min(-0, +0) and max(-0, +0) return b[i];
//  - the scaled sum is round(round(a_scale * a) + round(b_scale * b)), never fused (no FMA), in
//    f32 with the scales rounded to f32 (f32, f16, bf16) or in f64 (f64);
//  - a sum or product of two NaNs is a quiet NaN whose payload is one of the inputs';
//  - f64 -> f16/bf16 rounds once, directly (no double rounding through f32);
//  - the kernels assume the default floating-point environment (no FTZ/DAZ, round to nearest).
// Bad arguments (unknown dtype or op, scales on integers, NULL buffers with count > 0) are
// logged as errors and leave out untouched; check_*_args give the same verdict as a Status.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lib/core/settings.h"
#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt {

enum class ReduceOp { kSum, kProd, kMin, kMax };

// out[i] = a[i] OP b[i] for i < count. For kSum on floating dtypes, the inputs are scaled first:
// out[i] = a_scale * a[i] + b_scale * b[i] (scales of 1.0 cost nothing extra; they carry ZRT_AVG
// as 1/N and pre-multiplied sums). Scales must be 1.0 for integer dtypes and for other ops.
// out may be exactly a or exactly b (in place); any other overlap is undefined.
// stream_output: write out with non-temporal stores whatever count is (unless out is a or b),
// for a caller that writes a large result a piece at a time: each piece is small, the whole is
// larger than the caches, and streaming saves the read-for-ownership of every output line.
void reduce_elements(zrt_dtype_t dtype, ReduceOp op, const void* a, const void* b, void* out,
                     size_t count, double a_scale = 1.0, double b_scale = 1.0,
                     bool stream_output = false);

// out[i] = factor * in[i] (floating dtypes); out may be exactly in.
void scale_elements(zrt_dtype_t dtype, const void* in, void* out, size_t count, double factor);

// Converts count elements between floating dtypes (f32, f64, f16, bf16), rounding to nearest even.
// Same dtype is a copy. out must not overlap in unless from == to and out == in.
void convert_elements(zrt_dtype_t from, const void* in, zrt_dtype_t to, void* out, size_t count);

// Sum of squares of `count` elements, accumulated in f64 in a fixed order (blocks of 1024 in
// order, each summed left to right in f64), and whether any element is inf or NaN.
void sum_squares_and_nonfinite(zrt_dtype_t dtype, const void* in, size_t count, double* sum_squares,
                               bool* has_nonfinite);

// The variant the dispatcher chose: "avx512", "avx2", or "generic". ZRT_SIMD=generic|avx2|avx512
// forces a variant the CPU supports (for benchmarks and tests); an unaccepted or unsupported one
// leaves the best variant here and is refused by check_simd_setting.
const char* reduce_kernels_variant();

// ZRT_INVALID_ARGUMENT when `settings` force a variant this CPU or build cannot run, naming the
// variable, the value and the variants that run here. Communicator creation calls it.
Status check_simd_setting(const Settings& settings);

// The argument checks the kernels apply, as a Status naming the argument at fault.
Status check_reduce_args(zrt_dtype_t dtype, ReduceOp op, double a_scale, double b_scale);
Status check_scale_args(zrt_dtype_t dtype);
Status check_convert_args(zrt_dtype_t from, zrt_dtype_t to);

// Scalar conversions, exposed for tests and for code that handles single values.
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

}  // namespace zrt
