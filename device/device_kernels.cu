// Device kernels, one runtime-typed kernel per job rather than a template per dtype pair: the
// dtype switch is uniform across a warp (so nearly free), and the .cu compiles in seconds for
// three targets instead of minutes. Loops are grid-stride with a capped grid so one launch
// serves any count.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device/device_kernels_launch.h"

namespace zrt::kernels {
namespace {

constexpr int kF32 = 0;
constexpr int kF64 = 1;
constexpr int kF16 = 2;
constexpr int kBf16 = 3;
constexpr unsigned kMaxBlocks = 4096;

template <typename Acc>
__device__ __forceinline__ Acc load(int dtype, const void* p, size_t i) {
  switch (dtype) {
    case kF32:
      return static_cast<Acc>(static_cast<const float*>(p)[i]);
    case kF64:
      return static_cast<Acc>(static_cast<const double*>(p)[i]);
    case kF16:
      return static_cast<Acc>(__half2float(static_cast<const __half*>(p)[i]));
    case kBf16:
    default:
      return static_cast<Acc>(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
  }
}

// One rounding from Acc to the stored type (double -> half rounds once: __double2half).
template <typename Acc>
__device__ __forceinline__ void store(int dtype, void* p, size_t i, Acc v) {
  switch (dtype) {
    case kF32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case kF64:
      static_cast<double*>(p)[i] = static_cast<double>(v);
      break;
    case kF16:
      static_cast<__half*>(p)[i] = sizeof(Acc) == 8 ? __double2half(static_cast<double>(v))
                                                    : __float2half_rn(static_cast<float>(v));
      break;
    case kBf16:
    default:
      static_cast<__nv_bfloat16*>(p)[i] = sizeof(Acc) == 8
                                              ? __double2bfloat16(static_cast<double>(v))
                                              : __float2bfloat16_rn(static_cast<float>(v));
      break;
  }
}

template <typename Acc>
__global__ void convert_kernel(int from, const void* in, int to, void* out, size_t count) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    store<Acc>(to, out, i, load<Acc>(from, in, i));
  }
}

// Explicit rounding: nvcc would otherwise contract a + s * g into an FMA, which rounds once
// where the host kernels (built with -ffp-contract=off) round twice.
__device__ __forceinline__ float mul_rn(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ double mul_rn(double a, double b) {
  return __dmul_rn(a, b);
}
__device__ __forceinline__ float add_rn(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ __forceinline__ double add_rn(double a, double b) {
  return __dadd_rn(a, b);
}

template <typename Acc>
__global__ void accumulate_kernel(int acc_dtype, void* acc, int grad_dtype, const void* grad,
                                  size_t count, Acc scale) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    const Acc a = load<Acc>(acc_dtype, acc, i);
    const Acc g = load<Acc>(grad_dtype, grad, i);
    store<Acc>(acc_dtype, acc, i, add_rn(a, mul_rn(scale, g)));
  }
}

struct SpanTable {
  Span spans[kMaxSpansPerLaunch];
};

// blockIdx.y picks the span; 16-byte moves when the span allows them, bytes otherwise.
__global__ void copy_spans_kernel(SpanTable table) {
  const Span span = table.spans[blockIdx.y];
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  const size_t first = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  const bool wide = ((reinterpret_cast<uintptr_t>(span.src) |
                      reinterpret_cast<uintptr_t>(span.dst) | span.bytes) &
                     15) == 0;
  if (wide) {
    const uint4* src = static_cast<const uint4*>(span.src);
    uint4* dst = static_cast<uint4*>(span.dst);
    for (size_t i = first; i < span.bytes / 16; i += stride) dst[i] = src[i];
  } else {
    const unsigned char* src = static_cast<const unsigned char*>(span.src);
    unsigned char* dst = static_cast<unsigned char*>(span.dst);
    for (size_t i = first; i < span.bytes; i += stride) dst[i] = src[i];
  }
}

// Tree reduction in shared memory in a fixed order: the result depends only on the inputs.
__device__ void block_reduce(double* sums, int* flags) {
  for (unsigned width = blockDim.x / 2; width > 0; width /= 2) {
    __syncthreads();
    if (threadIdx.x < width) {
      sums[threadIdx.x] += sums[threadIdx.x + width];
      flags[threadIdx.x] |= flags[threadIdx.x + width];
    }
  }
  __syncthreads();
}

__global__ void sum_squares_partial_kernel(int dtype, const void* in, size_t count,
                                           double* partial_sums, int* partial_flags) {
  __shared__ double sums[kThreads];
  __shared__ int flags[kThreads];
  double sum = 0.0;
  int nonfinite = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    const double v = load<double>(dtype, in, i);
    if (!isfinite(v)) nonfinite = 1;
    sum += v * v;
  }
  sums[threadIdx.x] = sum;
  flags[threadIdx.x] = nonfinite;
  block_reduce(sums, flags);
  if (threadIdx.x == 0) {
    partial_sums[blockIdx.x] = sums[0];
    partial_flags[blockIdx.x] = flags[0];
  }
}

__global__ void sum_squares_final_kernel(const double* partial_sums, const int* partial_flags,
                                         unsigned partials, double* sum_squares, int* nonfinite) {
  __shared__ double sums[kThreads];
  __shared__ int flags[kThreads];
  double sum = 0.0;
  int flag = 0;
  for (unsigned i = threadIdx.x; i < partials; i += blockDim.x) {
    sum += partial_sums[i];
    flag |= partial_flags[i];
  }
  sums[threadIdx.x] = sum;
  flags[threadIdx.x] = flag;
  block_reduce(sums, flags);
  if (threadIdx.x == 0) {
    *sum_squares = sums[0];
    *nonfinite = flags[0];
  }
}

unsigned blocks_for(size_t count) {
  const size_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks == 0) return 1;
  return blocks > kMaxBlocks ? kMaxBlocks : static_cast<unsigned>(blocks);
}

}  // namespace

cudaError_t launch_convert(int from, const void* in, int to, void* out, size_t count,
                           cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (from == kF64 || to == kF64) {
    convert_kernel<double><<<blocks_for(count), kThreads, 0, stream>>>(from, in, to, out, count);
  } else {
    convert_kernel<float><<<blocks_for(count), kThreads, 0, stream>>>(from, in, to, out, count);
  }
  return cudaGetLastError();
}

cudaError_t launch_accumulate(int acc_dtype, void* acc, int grad_dtype, const void* grad,
                              size_t count, double scale, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (acc_dtype == kF64 || grad_dtype == kF64) {
    accumulate_kernel<double><<<blocks_for(count), kThreads, 0, stream>>>(
        acc_dtype, acc, grad_dtype, grad, count, scale);
  } else {
    accumulate_kernel<float><<<blocks_for(count), kThreads, 0, stream>>>(
        acc_dtype, acc, grad_dtype, grad, count, static_cast<float>(scale));
  }
  return cudaGetLastError();
}

cudaError_t launch_copy_spans(const Span* spans, int count, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  SpanTable table{};
  size_t largest = 0;
  for (int i = 0; i < count; ++i) {
    table.spans[i] = spans[i];
    if (spans[i].bytes > largest) largest = spans[i].bytes;
  }
  if (largest == 0) return cudaSuccess;
  const dim3 grid(blocks_for((largest + 15) / 16), static_cast<unsigned>(count));
  copy_spans_kernel<<<grid, kThreads, 0, stream>>>(table);
  return cudaGetLastError();
}

cudaError_t launch_sum_squares(int dtype, const void* in, size_t count, void* workspace,
                               double* sum_squares, int* nonfinite, cudaStream_t stream) {
  size_t wanted = (count + kThreads - 1) / kThreads;
  if (wanted == 0) wanted = 1;
  const unsigned blocks =
      wanted > kSumSquaresBlocks ? kSumSquaresBlocks : static_cast<unsigned>(wanted);
  double* partial_sums = static_cast<double*>(workspace);
  int* partial_flags = reinterpret_cast<int*>(partial_sums + kSumSquaresBlocks);
  sum_squares_partial_kernel<<<blocks, kThreads, 0, stream>>>(dtype, in, count, partial_sums,
                                                              partial_flags);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  sum_squares_final_kernel<<<1, kThreads, 0, stream>>>(partial_sums, partial_flags, blocks,
                                                       sum_squares, nonfinite);
  return cudaGetLastError();
}

}  // namespace zrt::kernels
