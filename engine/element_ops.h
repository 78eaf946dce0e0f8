// ElementOps: every element-wise operation the partition manager performs (copy, zero,
// convert, accumulate, scale, norm) goes through this one small interface, so that a device
// variant (ZRT_MEM_CUDA, made by the communicator's DeviceContext, engine/device.h) slots in
// without touching the manager's logic. The host variant (zero/partition/element_ops.h) runs the
// vectorised kernels of kernels/reduce.
//
// Declared here, below the partition and the NCCL layer, because both implement or use it.
//
// Thread-safety: implementations are stateless; calls from the training thread and from the
// progress thread (host functions after a reduce-scatter) may run concurrently on disjoint
// buffers.
#pragma once

#include <cstddef>
#include <functional>

#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt {

class Stream;

class ElementOps {
 public:
  virtual ~ElementOps() = default;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* dst, size_t bytes) = 0;
  // out = in, converted (rounding to nearest even).
  virtual void convert(zrt_dtype_t from, const void* in, zrt_dtype_t to, void* out,
                       size_t count) = 0;
  // dst += scale * src, src converted to dst's dtype first.
  virtual void accumulate(zrt_dtype_t src_dtype, const void* src, zrt_dtype_t dst_dtype, void* dst,
                          size_t count, double scale) = 0;
  virtual void scale(zrt_dtype_t dtype, void* data, size_t count, double factor) = 0;
  virtual void sum_squares(zrt_dtype_t dtype, const void* data, size_t count, double* sum,
                           bool* nonfinite) = 0;

  // Where later calls run (device/device_element_ops.h): on `stream` (nullptr: back to
  // the ops' own ordering). Host ops complete before they return, so they ignore it. Returns the
  // first failure any earlier call met (the calls above cannot return one).
  virtual Status bind(Stream* /*stream*/) { return Status::ok(); }
  // Runs `work`, which calls these ops, after everything enqueued on `stream` so far and before
  // what comes after: host ops enqueue it as a host function on the progress thread; device ops
  // launch its kernels on `stream` at once.
  virtual Status run_on(Stream& stream, std::function<Status()> work, const char* name);
};

// Binds `ops` to a stream for a scope. Unbinding cannot fail: a failure is kept by the ops and
// returned by their next bind (and by PartitionManager::destroy).
class ScopedBind {
 public:
  explicit ScopedBind(ElementOps& ops) : ops_(ops) {}
  ~ScopedBind() {
    if (bound_) static_cast<void>(ops_.bind(nullptr));
  }
  ScopedBind(const ScopedBind&) = delete;
  ScopedBind& operator=(const ScopedBind&) = delete;
  Status bind(Stream* stream) {
    bound_ = true;
    return ops_.bind(stream);
  }

 private:
  ElementOps& ops_;
  bool bound_ = false;
};

}  // namespace zrt
