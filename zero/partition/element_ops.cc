#include "zero/partition/element_ops.h"

#include <algorithm>
#include <cstring>

#include "kernels/reduce/reduce_kernels.h"
#include "lib/core/dtype.h"
#include "engine/engine.h"

namespace zrt {
namespace {

class HostElementOps final : public ElementOps {
 public:
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes > 0) std::memset(dst, 0, bytes);
  }
  void convert(zrt_dtype_t from, const void* in, zrt_dtype_t to, void* out, size_t count) override {
    if (count > 0) convert_elements(from, in, to, out, count);
  }
  void accumulate(zrt_dtype_t src_dtype, const void* src, zrt_dtype_t dst_dtype, void* dst,
                  size_t count, double scale) override {
    if (src_dtype == dst_dtype) {
      reduce_elements(dst_dtype, ReduceOp::kSum, dst, src, dst, count, 1.0, scale);
      return;
    }
    // Different dtypes: convert through a small stack buffer, so nothing is allocated and
    // concurrent callers share nothing.
    constexpr size_t kChunk = 2048;
    alignas(64) unsigned char tmp[kChunk * 8];
    const size_t src_size = dtype_size(src_dtype);
    const size_t dst_size = dtype_size(dst_dtype);
    for (size_t done = 0; done < count; done += kChunk) {
      const size_t n = std::min(kChunk, count - done);
      convert_elements(src_dtype, static_cast<const char*>(src) + done * src_size, dst_dtype, tmp,
                       n);
      void* out = static_cast<char*>(dst) + done * dst_size;
      reduce_elements(dst_dtype, ReduceOp::kSum, out, tmp, out, n, 1.0, scale);
    }
  }
  void scale(zrt_dtype_t dtype, void* data, size_t count, double factor) override {
    if (count > 0 && factor != 1.0) scale_elements(dtype, data, data, count, factor);
  }
  void sum_squares(zrt_dtype_t dtype, const void* data, size_t count, double* sum,
                   bool* nonfinite) override {
    *sum = 0;
    *nonfinite = false;
    if (count > 0) sum_squares_and_nonfinite(dtype, data, count, sum, nonfinite);
  }
};

}  // namespace

std::unique_ptr<ElementOps> create_host_element_ops() {
  return std::make_unique<HostElementOps>();
}

}  // namespace zrt
