// The communicator's device side: made on first use through the NCCL layer when zrt was built
// with it, refused with the reason otherwise. The layers above reach the GPU only through the
// DeviceContext handed out here.
#include <memory>
#include <mutex>
#include <utility>

#include "zero/comm/communicator.h"
#include "zero/comm/device_support.h"
#include "zrt_build_config.h"

#if ZRT_HAVE_NCCL_BUILD
#include "device/device_context.h"
#include "device/device_probe.h"
#endif

namespace zrt {
namespace {

#if !ZRT_HAVE_NCCL_BUILD
Status not_built() {
  return Status(ZRT_UNSUPPORTED,
                "zrt was built without NCCL (-Dnccl=disabled, or CUDA/NCCL not found at build "
                "time): ZRT_MEM_CUDA is unavailable");
}
#endif

}  // namespace

Status device_count(int* count) {
#if ZRT_HAVE_NCCL_BUILD
  return cuda_device_count(count);
#else
  static_cast<void>(count);
  return not_built();
#endif
}

Status device_library_version(int* version) {
#if ZRT_HAVE_NCCL_BUILD
  return nccl_version(version);
#else
  static_cast<void>(version);
  return not_built();
#endif
}

void Communicator::abort(const Status& reason) {
  engine_->abort(reason);
  std::shared_ptr<DeviceContext> device;
  {
    std::lock_guard<std::mutex> lock(device_mutex_);
    device = device_;
  }
  if (device != nullptr) device->abort(reason);
}

Status Communicator::device(std::shared_ptr<DeviceContext>* context) {
  std::lock_guard<std::mutex> lock(device_mutex_);
  if (device_ != nullptr) {
    *context = device_;
    return Status::ok();
  }
#if ZRT_HAVE_NCCL_BUILD
  DeviceContextOptions options;
  options.rank = rank_;
  options.size = size_;
  options.local_rank = local_rank_;
  // As the environment was when the communicator's settings were loaded.
  options.device_from_local_rank = options_.settings.launcher().is_set("ZRT_LOCAL_RANK");
  options.timeout_ms = options_.timeout_ms;
  options.name = options_.name;
  HostAllgather allgather = [this](const void* input, void* output, size_t bytes) -> Status {
    return gather_internal(input, output, bytes, "exchanging the NCCL unique id");
  };
  std::shared_ptr<DeviceContext> made;
  ZRT_RETURN_IF_ERROR(create_device_context(options, allgather, &made));
  device_ = made;
  *context = std::move(made);
  return Status::ok();
#else
  static_cast<void>(context);
  return not_built();
#endif
}

Status Communicator::device_error() const {
  std::shared_ptr<DeviceContext> device;
  {
    std::lock_guard<std::mutex> lock(device_mutex_);
    device = device_;
  }
  if (device == nullptr) return Status::ok();
  return device->error();
}

Status Communicator::split_device(int color, int key, Communicator* child) {
  std::shared_ptr<DeviceContext> parent;
  {
    std::lock_guard<std::mutex> lock(device_mutex_);
    parent = device_;
  }
  if (parent == nullptr) return Status::ok();  // the child makes its own on first use
  DeviceContextOptions options;
  if (child != nullptr) {
    options.rank = child->rank();
    options.size = child->size();
    options.local_rank = child->local_rank();
    options.timeout_ms = child->options().timeout_ms;
    options.name = child->options().name;
  }
  std::shared_ptr<DeviceContext> made;
  ZRT_RETURN_IF_ERROR(
      parent->split(child != nullptr ? color : ZRT_SPLIT_NOCOLOR, key, options, &made));
  if (child != nullptr && made != nullptr) {
    std::lock_guard<std::mutex> lock(child->device_mutex_);
    child->device_ = std::move(made);
  }
  return Status::ok();
}

void Communicator::release_device() {
  std::lock_guard<std::mutex> lock(device_mutex_);
  device_.reset();
}

}  // namespace zrt
