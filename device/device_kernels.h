// CUDA kernels for the device path: master -> parameter conversion, gradient accumulation into
// the shard, bucket pack/unpack, and the fused sum-of-squares + inf/NaN check used for gradient
// clipping and loss-scale overflow detection. Each call validates its arguments, launches on
// `stream` and returns at once (launch failures come back as a Status; execution failures
// surface on the stream). None allocates.
//
// Arithmetic follows the host kernels (kernels/reduce/reduce_kernels.h): f16 and bf16 are
// widened to f32, combined and rounded to nearest even once; f64 anywhere means f64 arithmetic.
// The sum of squares is accumulated in f64 in a fixed tree order that depends only on `count`,
// so it is identical from run to run (but not bit-identical to the host's left-to-right order).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt {

// out[i] = (to) in[i] for floating dtypes (f32, f64, f16, bf16). out may be exactly in only if
// from == to; other overlaps are refused when detectable.
Status device_convert(zrt_dtype_t from, const void* in, zrt_dtype_t to, void* out, size_t count,
                      cudaStream_t stream);

// acc[i] = acc[i] + scale * grad[i] (floating dtypes, any mix).
Status device_accumulate(zrt_dtype_t acc_dtype, void* acc, zrt_dtype_t grad_dtype, const void* grad,
                         size_t count, double scale, cudaStream_t stream);

// Copies each span (device to device) in one launch per 32 spans: a bucket's parameters
// gathered into its contiguous buffer (pack) or scattered back (unpack). Spans must not overlap.
struct DeviceCopySpan {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
};
Status device_copy_spans(const DeviceCopySpan* spans, size_t count, cudaStream_t stream);

// Device workspace device_sum_squares_nonfinite needs (constant, independent of count).
size_t device_sum_squares_workspace_bytes();

// *sum_squares (device f64) = sum of in[i]^2; *nonfinite (device i32) = 1 if any element is
// inf or NaN, else 0. Both outputs and `workspace` are device memory.
Status device_sum_squares_nonfinite(zrt_dtype_t dtype, const void* in, size_t count,
                                    void* workspace, double* sum_squares, int* nonfinite,
                                    cudaStream_t stream);

}  // namespace zrt
