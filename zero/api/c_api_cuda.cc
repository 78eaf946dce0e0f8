// The CUDA part of the C API: device queries, CUDA streams and events. The device side of a
// communicator (engine/device.h) belongs to its Communicator, which makes it on first use
// (collectively) and shares it with its CUDA streams and events. Builds without NCCL keep every
// entry point, answering ZRT_UNSUPPORTED after the usual argument checks (the communicator says
// why), so that a framework can probe for CUDA support with the same calls everywhere.
#include <memory>
#include <mutex>
#include <utility>

#include "zero/api/api_common.h"
#include "zero/comm/device_support.h"
#include "engine/device.h"

namespace zrt::api {
namespace {

Status make_cuda_stream(zrt_comm* comm, void* cuda_stream, bool wrap_external, zrt_stream** out) {
  std::shared_ptr<DeviceContext> context;
  ZRT_RETURN_IF_ERROR(comm->impl->device(&context));
  int index = 0;
  {
    std::lock_guard<std::mutex> lock(comm->handles_mutex);
    index = static_cast<int>(comm->streams.size()) + 1;  // 0 is the default stream
  }
  std::unique_ptr<Stream> stream;
  ZRT_RETURN_IF_ERROR(
      context->create_stream(comm->impl->engine(), index, cuda_stream, wrap_external, &stream));
  auto handle = std::make_unique<zrt_stream>();
  handle->comm = comm;
  handle->impl = stream.get();
  handle->owned = std::move(stream);
  zrt_stream* result = handle.get();
  {
    std::lock_guard<std::mutex> lock(comm->handles_mutex);
    comm->streams.push_back(std::move(handle));
  }
  *out = result;
  return Status::ok();
}

}  // namespace

Status create_cuda_stream(zrt_comm* comm, zrt_stream** out) {
  ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
  ZRT_RETURN_IF_ERROR(check_not_null(out, "stream"));
  return make_cuda_stream(comm, nullptr, false, out);
}

Status device_context_for(zrt_comm* comm, std::shared_ptr<DeviceContext>* context) {
  ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
  return comm->impl->device(context);
}

// The bodies of the C entry points.
Status cuda_device_count_impl(int* count) {
  ZRT_RETURN_IF_ERROR(check_not_null(count, "count"));
  return device_count(count);
}

Status nccl_version_impl(int* version) {
  ZRT_RETURN_IF_ERROR(check_not_null(version, "version"));
  return device_library_version(version);
}

Status stream_from_cuda_impl(zrt_comm* comm, void* cuda_stream, zrt_stream** stream) {
  ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
  ZRT_RETURN_IF_ERROR(check_not_null(stream, "stream"));
  return make_cuda_stream(comm, cuda_stream, true, stream);
}

Status stream_get_cuda_impl(zrt_stream* stream, void** cuda_stream) {
  ZRT_RETURN_IF_ERROR(check_stream(stream, "stream"));
  ZRT_RETURN_IF_ERROR(check_not_null(cuda_stream, "cuda_stream"));
  return device_stream_handle(*stream->impl, cuda_stream);
}

Status event_create_cuda_impl(zrt_comm* comm, zrt_event** event) {
  ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
  ZRT_RETURN_IF_ERROR(check_not_null(event, "event"));
  std::shared_ptr<DeviceContext> context;
  ZRT_RETURN_IF_ERROR(comm->impl->device(&context));
  std::unique_ptr<Event> made;
  ZRT_RETURN_IF_ERROR(context->create_event(comm->impl->engine(), &made));
  auto handle = std::make_unique<zrt_event>();
  handle->comm = comm;
  handle->impl = made.get();
  handle->owned = std::move(made);
  zrt_event* result = handle.get();
  {
    std::lock_guard<std::mutex> lock(comm->handles_mutex);
    comm->events.push_back(std::move(handle));
  }
  *event = result;
  return Status::ok();
}

}  // namespace zrt::api

extern "C" {

zrt_status_t zrt_cuda_device_count(int* count) {
  ZRT_API_BODY("zrt_cuda_device_count", { return zrt::api::cuda_device_count_impl(count); });
}

zrt_status_t zrt_nccl_version(int* version) {
  ZRT_API_BODY("zrt_nccl_version", { return zrt::api::nccl_version_impl(version); });
}

zrt_status_t zrt_stream_from_cuda(zrt_comm_t comm, void* cuda_stream, zrt_stream_t* stream) {
  ZRT_API_BODY("zrt_stream_from_cuda",
               { return zrt::api::stream_from_cuda_impl(comm, cuda_stream, stream); });
}

zrt_status_t zrt_stream_get_cuda(zrt_stream_t stream, void** cuda_stream) {
  ZRT_API_BODY("zrt_stream_get_cuda",
               { return zrt::api::stream_get_cuda_impl(stream, cuda_stream); });
}

zrt_status_t zrt_event_create_cuda(zrt_comm_t comm, zrt_event_t* event) {
  ZRT_API_BODY("zrt_event_create_cuda", { return zrt::api::event_create_cuda_impl(comm, event); });
}

}  // extern "C"
