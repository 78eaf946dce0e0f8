#include "device/device_kernels.h"

#include <cstdint>

#include "lib/core/dtype.h"
#include "device/cuda_status.h"
#include "device/device_kernels_launch.h"

namespace zrt {
namespace {

bool kernel_dtype(zrt_dtype_t dtype) {
  return dtype == ZRT_F32 || dtype == ZRT_F64 || dtype == ZRT_F16 || dtype == ZRT_BF16;
}

Status check_kernel_dtype(zrt_dtype_t dtype, const char* arg) {
  if (!kernel_dtype(dtype)) {
    return Status::invalid_argument("{} must be f32, f64, f16 or bf16, got {}", arg,
                                    static_cast<int>(dtype));
  }
  return Status::ok();
}

Status check_buffer(const void* buffer, size_t count, const char* arg) {
  if (buffer == nullptr && count > 0) return Status::invalid_argument("{} is NULL", arg);
  return Status::ok();
}

bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto a0 = reinterpret_cast<uintptr_t>(a);
  const auto b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

}  // namespace

Status device_convert(zrt_dtype_t from, const void* in, zrt_dtype_t to, void* out, size_t count,
                      cudaStream_t stream) {
  ZRT_RETURN_IF_ERROR(check_kernel_dtype(from, "from"));
  ZRT_RETURN_IF_ERROR(check_kernel_dtype(to, "to"));
  ZRT_RETURN_IF_ERROR(check_buffer(in, count, "in"));
  ZRT_RETURN_IF_ERROR(check_buffer(out, count, "out"));
  const bool exact_in_place = from == to && in == out;
  if (!exact_in_place &&
      ranges_overlap(in, count * dtype_size(from), out, count * dtype_size(to))) {
    return Status::invalid_argument("out overlaps in (only from == to and out == in may alias)");
  }
  if (exact_in_place) return Status::ok();
  return cuda_status(kernels::launch_convert(from, in, to, out, count, stream),
                     "device_convert launch");
}

Status device_accumulate(zrt_dtype_t acc_dtype, void* acc, zrt_dtype_t grad_dtype, const void* grad,
                         size_t count, double scale, cudaStream_t stream) {
  ZRT_RETURN_IF_ERROR(check_kernel_dtype(acc_dtype, "acc_dtype"));
  ZRT_RETURN_IF_ERROR(check_kernel_dtype(grad_dtype, "grad_dtype"));
  ZRT_RETURN_IF_ERROR(check_buffer(acc, count, "acc"));
  ZRT_RETURN_IF_ERROR(check_buffer(grad, count, "grad"));
  return cuda_status(
      kernels::launch_accumulate(acc_dtype, acc, grad_dtype, grad, count, scale, stream),
      "device_accumulate launch");
}

Status device_copy_spans(const DeviceCopySpan* spans, size_t count, cudaStream_t stream) {
  ZRT_RETURN_IF_ERROR(check_buffer(spans, count, "spans"));
  kernels::Span batch[kernels::kMaxSpansPerLaunch];
  size_t done = 0;
  while (done < count) {
    int n = 0;
    for (; n < kernels::kMaxSpansPerLaunch && done + n < count; ++n) {
      const DeviceCopySpan& span = spans[done + n];
      if (span.bytes > 0 && (span.src == nullptr || span.dst == nullptr)) {
        return Status::invalid_argument("spans[{}] has a NULL pointer with {} bytes", done + n,
                                        span.bytes);
      }
      batch[n] = kernels::Span{span.src, span.dst, span.bytes};
    }
    ZRT_RETURN_IF_ERROR(
        cuda_status(kernels::launch_copy_spans(batch, n, stream), "device_copy_spans launch"));
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

size_t device_sum_squares_workspace_bytes() {
  return kernels::kSumSquaresBlocks * (sizeof(double) + sizeof(int));
}

Status device_sum_squares_nonfinite(zrt_dtype_t dtype, const void* in, size_t count,
                                    void* workspace, double* sum_squares, int* nonfinite,
                                    cudaStream_t stream) {
  ZRT_RETURN_IF_ERROR(check_kernel_dtype(dtype, "dtype"));
  ZRT_RETURN_IF_ERROR(check_buffer(in, count, "in"));
  ZRT_RETURN_IF_ERROR(check_buffer(workspace, 1, "workspace"));
  ZRT_RETURN_IF_ERROR(check_buffer(sum_squares, 1, "sum_squares"));
  ZRT_RETURN_IF_ERROR(check_buffer(nonfinite, 1, "nonfinite"));
  return cuda_status(
      kernels::launch_sum_squares(dtype, in, count, workspace, sum_squares, nonfinite, stream),
      "device_sum_squares_nonfinite launch");
}

}  // namespace zrt
