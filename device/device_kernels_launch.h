// The raw launchers in device_kernels.cu, kept free of zrt and fmt headers so that nvcc compiles
// only CUDA code. Arguments are validated by device_kernels.cc before they get here. Dtypes are
// zrt_dtype_t values passed as int.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace zrt::kernels {

inline constexpr int kMaxSpansPerLaunch = 32;
inline constexpr int kSumSquaresBlocks = 1024;
inline constexpr int kThreads = 256;

struct Span {
  const void* src;
  void* dst;
  size_t bytes;
};

cudaError_t launch_convert(int from, const void* in, int to, void* out, size_t count,
                           cudaStream_t stream);
cudaError_t launch_accumulate(int acc_dtype, void* acc, int grad_dtype, const void* grad,
                              size_t count, double scale, cudaStream_t stream);
cudaError_t launch_copy_spans(const Span* spans, int count, cudaStream_t stream);
cudaError_t launch_sum_squares(int dtype, const void* in, size_t count, void* workspace,
                               double* sum_squares, int* nonfinite, cudaStream_t stream);

}  // namespace zrt::kernels
