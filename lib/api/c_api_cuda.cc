// The CUDA part of the C API: device queries, CUDA streams and events. The NCCL side of a
// communicator (transports/nccl/device_context.h) is made on first use, under the
// communicator's device mutex, and shared by its CUDA streams and events. Builds without NCCL
// keep every entry point, answering ZRT_UNSUPPORTED after the usual argument checks, so that a
// framework can probe for CUDA support with the same calls everywhere.
#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>

#include "lib/api/api_common.h"
#include "zrt_build_config.h"

#if ZRT_HAVE_NCCL_BUILD
#include "collectives/collectives.h"
#include "lib/core/environment.h"
#include "transports/nccl/device_context.h"
#include "transports/nccl/device_probe.h"
#endif

namespace zrt::api {
namespace {

#if ZRT_HAVE_NCCL_BUILD

// The communicator's device context, created (collectively) if it does not exist yet.
Status ensure_device(zrt_comm* comm, std::shared_ptr<DeviceContext>* context) {
  std::lock_guard<std::mutex> lock(comm->device_mutex);
  if (comm->device != nullptr) {
    *context = comm->device;
    return Status::ok();
  }
  Communicator& host = *comm->impl;
  DeviceContextOptions options;
  options.rank = host.rank();
  options.size = host.size();
  options.local_rank = host.local_rank();
  options.device_from_local_rank = read_environment("ZRT_LOCAL_RANK") != nullptr;
  options.timeout_ms = host.options().timeout_ms;
  options.name = host.options().name;
  // NCCL's unique id travels over the host path: an all-gather on the default stream.
  HostAllgather allgather = [&host](const void* input, void* output, size_t bytes) -> Status {
    CollectiveArgs args;
    args.kind = ZRT_COLL_ALL_GATHER;
    args.sendbuf = input;
    args.recvbuf = output;
    args.count = bytes;
    args.dtype = ZRT_U8;
    return host.run_internal(args, "exchanging the NCCL unique id");
  };
  std::shared_ptr<DeviceContext> made;
  ZRT_RETURN_IF_ERROR(create_device_context(options, allgather, &made));
  comm->device = made;
  *context = std::move(made);
  return Status::ok();
}

Status make_cuda_stream(zrt_comm* comm, void* cuda_stream, bool wrap_external, zrt_stream** out) {
  std::shared_ptr<DeviceContext> context;
  ZRT_RETURN_IF_ERROR(ensure_device(comm, &context));
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

#else  // !ZRT_HAVE_NCCL_BUILD

Status not_built() {
  return Status(ZRT_UNSUPPORTED,
                "zrt was built without NCCL (-Dnccl=disabled, or CUDA/NCCL not found at build "
                "time): ZRT_MEM_CUDA is unavailable");
}

#endif

}  // namespace

Status create_cuda_stream(zrt_comm* comm, zrt_stream** out) {
  ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
  ZRT_RETURN_IF_ERROR(check_not_null(out, "stream"));
#if ZRT_HAVE_NCCL_BUILD
  return make_cuda_stream(comm, nullptr, false, out);
#else
  return not_built();
#endif
}

Status device_context_for(zrt_comm* comm, std::shared_ptr<DeviceContext>* context) {
  ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
#if ZRT_HAVE_NCCL_BUILD
  return ensure_device(comm, context);
#else
  static_cast<void>(context);
  return not_built();
#endif
}

Status split_device_context(zrt_comm* parent, int color, int key, zrt_comm* child) {
  ZRT_RETURN_IF_ERROR(check_comm(parent, "comm"));
#if ZRT_HAVE_NCCL_BUILD
  std::shared_ptr<DeviceContext> parent_context;
  {
    std::lock_guard<std::mutex> lock(parent->device_mutex);
    parent_context = parent->device;
  }
  if (parent_context == nullptr) return Status::ok();  // the child initialises on first use
  DeviceContextOptions options;
  if (child != nullptr) {
    ZRT_RETURN_IF_ERROR(check_comm(child, "newcomm"));
    options.rank = child->impl->rank();
    options.size = child->impl->size();
    options.local_rank = child->impl->local_rank();
    options.timeout_ms = child->impl->options().timeout_ms;
    options.name = child->impl->options().name;
  }
  std::shared_ptr<DeviceContext> made;
  ZRT_RETURN_IF_ERROR(
      parent_context->split(child != nullptr ? color : ZRT_SPLIT_NOCOLOR, key, options, &made));
  if (child != nullptr && made != nullptr) {
    std::lock_guard<std::mutex> lock(child->device_mutex);
    child->device = std::move(made);
  }
  return Status::ok();
#else
  (void)color;
  (void)key;
  (void)child;
  return Status::ok();  // no NCCL side to split
#endif
}

// The bodies of the C entry points, kept out of ZRT_API_BODY so that the build switches are not
// preprocessor directives inside a macro argument.
Status cuda_device_count_impl(int* count) {
  ZRT_RETURN_IF_ERROR(check_not_null(count, "count"));
#if ZRT_HAVE_NCCL_BUILD
  return cuda_device_count(count);
#else
  return not_built();
#endif
}

Status nccl_version_impl(int* version) {
  ZRT_RETURN_IF_ERROR(check_not_null(version, "version"));
#if ZRT_HAVE_NCCL_BUILD
  return nccl_version(version);
#else
  return not_built();
#endif
}

Status stream_from_cuda_impl(zrt_comm* comm, void* cuda_stream, zrt_stream** stream) {
  ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
  ZRT_RETURN_IF_ERROR(check_not_null(stream, "stream"));
#if ZRT_HAVE_NCCL_BUILD
  return make_cuda_stream(comm, cuda_stream, true, stream);
#else
  (void)cuda_stream;
  return not_built();
#endif
}

Status stream_get_cuda_impl(zrt_stream* stream, void** cuda_stream) {
  ZRT_RETURN_IF_ERROR(check_stream(stream, "stream"));
  ZRT_RETURN_IF_ERROR(check_not_null(cuda_stream, "cuda_stream"));
#if ZRT_HAVE_NCCL_BUILD
  return cuda_stream_handle(*stream->impl, cuda_stream);
#else
  return Status::invalid_argument(
      "stream is a host stream, not a CUDA stream (zrt was built without NCCL)");
#endif
}

Status event_create_cuda_impl(zrt_comm* comm, zrt_event** event) {
  ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
  ZRT_RETURN_IF_ERROR(check_not_null(event, "event"));
#if ZRT_HAVE_NCCL_BUILD
  std::shared_ptr<DeviceContext> context;
  ZRT_RETURN_IF_ERROR(ensure_device(comm, &context));
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
#else
  return not_built();
#endif
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
