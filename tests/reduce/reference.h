// Scalar references for the reduction kernels, written from the definitions in
// reduce_kernels.h independently of the kernel code, plus helpers the tests share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/reduce/kernel_variants.h"
#include "kernels/reduce/reduce_kernels.h"

namespace zrt::testing {

// The variants this CPU supports (generic always first).
std::vector<reduce_internal::Variant> supported_variants();

// Reference RNE conversions: nearest representable value by comparing distances, ties to even.
uint16_t ref_f32_to_bf16(float f);
uint16_t ref_f64_to_bf16(double d);
uint16_t ref_f32_to_f16(float f);
uint16_t ref_f64_to_f16(double d);
float ref_f16_to_f32(uint16_t h);
float ref_bf16_to_f32(uint16_t h);

// Element i of a buffer as a double (floats widened exactly) / as raw bits.
double element_value(zrt_dtype_t dtype, const void* buffer, size_t i);
uint64_t element_bits(zrt_dtype_t dtype, const void* buffer, size_t i);
bool element_is_nan(zrt_dtype_t dtype, const void* buffer, size_t i);

// Reference a OP b for element i (a_scale/b_scale as in reduce_elements), written into out.
void ref_reduce(zrt_dtype_t dtype, ReduceOp op, const void* a, const void* b, void* out, size_t i,
                double a_scale, double b_scale);

// Fills count elements with random values; for floats, every `special_every`-th element (from
// `special_phase`) is one of: ±0, ±inf, NaNs (quiet, signalling, negative), subnormals, the
// largest finite values, values that round to ties.
void fill_random(zrt_dtype_t dtype, void* buffer, size_t count, std::mt19937_64& rng,
                 size_t special_every = 11, size_t special_phase = 3);

std::string describe(zrt_dtype_t dtype, ReduceOp op, size_t count, size_t misalign,
                     reduce_internal::Variant variant);

}  // namespace zrt::testing
