#include "device/device_element_ops.h"

#include <cuda_runtime.h>

#include <cstring>

#include "lib/core/dtype.h"
#include "lib/core/log.h"
#include "device/cuda_status.h"
#include "device/cuda_stream.h"
#include "device/device_arena.h"
#include "device/device_kernels.h"

namespace zrt {
namespace {

class DeviceArenaBackend final : public ArenaBackend {
 public:
  explicit DeviceArenaBackend(int device) : device_(device) {}
  Status allocate(size_t bytes, void** block) override {
    // DeviceArena zero-fills and waits for it, so the block is ready when this returns.
    ZRT_RETURN_IF_ERROR(
        DeviceArena::create(device_, bytes, DeviceArena::Source::kNcclMemAlloc, &arena_));
    *block = arena_->base();
    return Status::ok();
  }
  void free(void* /*block*/) override { arena_.reset(); }

 private:
  int device_;
  std::unique_ptr<DeviceArena> arena_;
};

// cudaHostAlloc'd memory: the device reaches it by its host address (unified addressing), so
// kernels convert straight between it and device buffers, and copies of it are asynchronous.
class PinnedHostArenaBackend final : public ArenaBackend {
 public:
  explicit PinnedHostArenaBackend(int device) : device_(device) {}
  Status allocate(size_t bytes, void** block) override {
    DeviceGuard guard;
    ZRT_RETURN_IF_ERROR(guard.enter(device_));
    const cudaError_t err =
        cudaHostAlloc(block, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
    if (err != cudaSuccess) {
      *block = nullptr;
      return Status::error(ZRT_OUT_OF_MEMORY, "cudaHostAlloc of {} bytes of pinned host memory: {}",
                           bytes, cudaGetErrorString(err));
    }
    std::memset(*block, 0, bytes);
    return Status::ok();
  }
  void free(void* block) override { cudaFreeHost(block); }

 private:
  int device_;
};

class DeviceElementOps final : public ElementOps {
 public:
  explicit DeviceElementOps(int device) : device_(device) {}
  ~DeviceElementOps() override {
    DeviceGuard guard;
    if (!guard.enter(device_).is_ok()) return;
    if (own_ != nullptr) cudaStreamSynchronize(own_);
    if (workspace_ != nullptr) cudaFree(workspace_);
    if (framework_done_ != nullptr) cudaEventDestroy(framework_done_);
    if (own_ != nullptr) cudaStreamDestroy(own_);
  }

  Status init() {
    DeviceGuard guard;
    ZRT_RETURN_IF_ERROR(guard.enter(device_));
    ZRT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&own_, cudaStreamNonBlocking));
    ZRT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&framework_done_, cudaEventDisableTiming));
    // Sum (f64) and flag (i32) first, the kernel's workspace after them.
    ZRT_CUDA_RETURN_IF_ERROR(cudaMalloc(&workspace_, 16 + device_sum_squares_workspace_bytes()));
    return Status::ok();
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    // cudaMemcpyDefault: checkpoint copies may have a host side (unified addressing).
    launch(cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, current()),
                       "cudaMemcpyAsync"));
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes == 0) return;
    launch(cuda_status(cudaMemsetAsync(dst, 0, bytes, current()), "cudaMemsetAsync"));
  }
  void convert(zrt_dtype_t from, const void* in, zrt_dtype_t to, void* out, size_t count) override {
    if (count == 0) return;
    if (from == to) {
      copy(out, in, count * dtype_size(to));
      return;
    }
    launch(device_convert(from, in, to, out, count, current()));
  }
  void accumulate(zrt_dtype_t src_dtype, const void* src, zrt_dtype_t dst_dtype, void* dst,
                  size_t count, double scale) override {
    if (count == 0) return;
    launch(device_accumulate(dst_dtype, dst, src_dtype, src, count, scale, current()));
  }
  void scale(zrt_dtype_t dtype, void* data, size_t count, double factor) override {
    if (count == 0 || factor == 1.0) return;
    // data = data + (factor - 1) * data: the accumulate kernel allows acc == grad, and the
    // product rounds once as the host's scale does for f32/f64 (f16/bf16 round once too).
    launch(device_accumulate(dtype, data, dtype, data, count, factor - 1.0, current()));
  }
  void sum_squares(zrt_dtype_t dtype, const void* data, size_t count, double* sum,
                   bool* nonfinite) override {
    *sum = 0;
    *nonfinite = false;
    if (count == 0) return;
    // The figures go to the host, so this one always waits (zrt_partition_grad_norm returns
    // them); it runs on the bound stream when there is one, after the reductions.
    char* base = static_cast<char*>(workspace_);
    double host_sum = 0;
    int host_flag = 0;
    cudaStream_t stream = current();
    Status status =
        device_sum_squares_nonfinite(dtype, data, count, base + 16, reinterpret_cast<double*>(base),
                                     reinterpret_cast<int*>(base + 8), stream);
    if (status.is_ok()) {
      status = cuda_status(
          cudaMemcpyAsync(&host_sum, base, sizeof(host_sum), cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync");
    }
    if (status.is_ok()) {
      status = cuda_status(
          cudaMemcpyAsync(&host_flag, base + 8, sizeof(host_flag), cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync");
    }
    if (status.is_ok())
      status = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (!status.is_ok()) {
      keep(status.with_context("device sum of squares"));
      // Report the failure as a non-finite norm too, so no optimizer trusts a missing figure.
      *nonfinite = true;
      return;
    }
    *sum = host_sum;
    *nonfinite = host_flag != 0;
  }

  Status bind(Stream* stream) override {
    if (stream == nullptr) {
      if (bound_cuda_ != nullptr) {
        // The framework's next kernels (default stream) come after what was launched here: they
        // overwrite the gradient window, read the published parameters. Device-side again.
        DeviceGuard guard;
        Status status = guard.enter(device_);
        if (status.is_ok()) {
          status = cuda_status(cudaEventRecord(framework_done_, bound_cuda_), "cudaEventRecord");
        }
        if (status.is_ok()) {
          status = cuda_status(cudaStreamWaitEvent(cudaStreamLegacy, framework_done_, 0),
                               "cudaStreamWaitEvent");
        }
        if (!status.is_ok()) keep(status);
      }
      bound_ = nullptr;
      bound_cuda_ = nullptr;
      return error_;
    }
    auto* cuda = dynamic_cast<CudaStream*>(stream);
    if (cuda == nullptr) {
      void* handle = nullptr;
      return device_stream_handle(*stream, &handle);  // the error naming the stream
    }
    bound_ = cuda;
    bound_cuda_ = cuda->cuda();
    // After the framework's kernels on its default (or any blocking) stream: its gradients and
    // its optimizer's updates. A device-side wait, never a host one.
    DeviceGuard guard;
    ZRT_RETURN_IF_ERROR(guard.enter(device_));
    ZRT_CUDA_RETURN_IF_ERROR(cudaEventRecord(framework_done_, cudaStreamLegacy));
    ZRT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(bound_cuda_, framework_done_, 0));
    return error_;
  }

  Status run_on(Stream& stream, std::function<Status()> work, const char* name) override {
    CudaStream* previous = bound_;
    cudaStream_t previous_cuda = bound_cuda_;
    Status status = bind(&stream);
    if (status.is_ok()) status = work();
    bound_ = previous;
    bound_cuda_ = previous_cuda;
    if (!status.is_ok()) return status.with_context(name);
    return error_;
  }

 private:
  cudaStream_t current() const { return bound_cuda_ != nullptr ? bound_cuda_ : own_; }

  // Unbound calls keep the host ops' meaning (done on return); bound ones only launch. A
  // failure is kept (bind/run_on return it) and fails the bound stream, whose waits report it.
  void launch(const Status& status) {
    Status result = status;
    if (result.is_ok() && bound_cuda_ == nullptr) {
      result = cuda_status(cudaStreamSynchronize(own_), "cudaStreamSynchronize");
    }
    if (!result.is_ok()) keep(result);
  }

  void keep(const Status& status) {
    ZRT_LOG_ERROR("partition device op failed: {}", status.message());
    if (error_.is_ok()) error_ = status;
    if (bound_ != nullptr) bound_->fail(status);
  }

  int device_;
  cudaStream_t own_ = nullptr;
  cudaEvent_t framework_done_ = nullptr;
  void* workspace_ = nullptr;
  CudaStream* bound_ = nullptr;
  cudaStream_t bound_cuda_ = nullptr;
  Status error_;
};

}  // namespace

Status create_device_arena_backend(int device, std::unique_ptr<ArenaBackend>* backend) {
  *backend = std::make_unique<DeviceArenaBackend>(device);
  return Status::ok();
}

Status create_pinned_host_arena_backend(int device, std::unique_ptr<ArenaBackend>* backend) {
  *backend = std::make_unique<PinnedHostArenaBackend>(device);
  return Status::ok();
}

Status create_device_element_ops(int device, std::unique_ptr<ElementOps>* ops) {
  auto made = std::make_unique<DeviceElementOps>(device);
  ZRT_RETURN_IF_ERROR(made->init().with_context("partition device element ops"));
  *ops = std::move(made);
  return Status::ok();
}

}  // namespace zrt
