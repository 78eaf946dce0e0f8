// zrt_stream_* and zrt_event_*: thin wrappers over the progress engine's streams and events.
// The communicator handle owns every stream and event handle made on it.
#include <algorithm>
#include <memory>

#include "zero/api/api_common.h"

using zrt::Status;
using zrt::api::check_comm;
using zrt::api::check_event;
using zrt::api::check_not_null;
using zrt::api::check_stream;

namespace {

Status check_same_comm(const zrt_stream* stream, const zrt_event* event) {
  if (stream->comm != event->comm) {
    return Status::invalid_argument("event belongs to another communicator than stream");
  }
  return Status::ok();
}

template <typename Handle>
void forget_handle(std::vector<std::unique_ptr<Handle>>& handles, Handle* handle) {
  handle->magic = kDeadMagic;
  handle->impl = nullptr;
  handles.erase(std::remove_if(handles.begin(), handles.end(),
                               [handle](const auto& owned) { return owned.get() == handle; }),
                handles.end());
}

// NULL names a communicator's default stream only where a communicator is passed too; these
// calls have none, so the message says how to wait for the default stream instead.
Status check_waitable_stream(const zrt_stream* stream) {
  if (stream != nullptr) return check_stream(stream, "stream");
  return Status::invalid_argument(
      "stream is NULL: NULL means the default stream only in calls that also take the "
      "communicator, and this one does not; to wait for work on the default stream, record an "
      "event there (zrt_event_create, zrt_event_record(event, NULL)) and call "
      "zrt_event_synchronize(event), or enqueue the work on a stream of your own "
      "(zrt_stream_create) and pass that");
}

}  // namespace

extern "C" {

zrt_status_t zrt_stream_create(zrt_comm_t comm, zrt_mem_kind_t kind, zrt_stream_t* stream) {
  ZRT_API_BODY("zrt_stream_create", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    ZRT_RETURN_IF_ERROR(check_not_null(stream, "stream"));
    if (kind == ZRT_MEM_CUDA) {
      zrt_stream* created = nullptr;
      ZRT_RETURN_IF_ERROR(zrt::api::create_cuda_stream(comm, &created));
      *stream = created;
      return Status::ok();
    }
    if (kind != ZRT_MEM_HOST) {
      return Status::invalid_argument("kind {} is not a zrt_mem_kind_t", static_cast<int>(kind));
    }
    zrt::Stream* impl = nullptr;
    ZRT_RETURN_IF_ERROR(comm->impl->engine().create_stream(kind, &impl));
    auto handle = std::make_unique<zrt_stream>();
    handle->comm = comm;
    handle->impl = impl;
    zrt_stream* raw = handle.get();
    {
      std::lock_guard<std::mutex> lock(comm->handles_mutex);
      comm->streams.push_back(std::move(handle));
    }
    *stream = raw;
    return Status::ok();
  });
}

zrt_status_t zrt_stream_destroy(zrt_stream_t stream) {
  ZRT_API_BODY("zrt_stream_destroy", {
    ZRT_RETURN_IF_ERROR(check_stream(stream, "stream"));
    zrt_comm* comm = stream->comm;
    if (stream == &comm->default_stream) {
      return Status::invalid_usage(
          "stream is the communicator's default stream; it is freed by "
          "zrt_comm_destroy");
    }
    Status status;
    if (stream->owned != nullptr) {
      status = stream->impl->synchronize();
      stream->owned.reset();
    } else {
      status = comm->impl->engine().destroy_stream(stream->impl);
    }
    std::lock_guard<std::mutex> lock(comm->handles_mutex);
    forget_handle(comm->streams, stream);
    return status;
  });
}

zrt_status_t zrt_stream_synchronize(zrt_stream_t stream) {
  ZRT_API_BODY("zrt_stream_synchronize", {
    ZRT_RETURN_IF_ERROR(check_waitable_stream(stream));
    return stream->impl->synchronize();
  });
}

zrt_status_t zrt_stream_query(zrt_stream_t stream) {
  ZRT_API_BODY("zrt_stream_query", {
    ZRT_RETURN_IF_ERROR(check_waitable_stream(stream));
    return stream->impl->query();
  });
}

zrt_status_t zrt_stream_wait_event(zrt_stream_t stream, zrt_event_t event) {
  ZRT_API_BODY("zrt_stream_wait_event", {
    ZRT_RETURN_IF_ERROR(check_stream(stream, "stream"));
    ZRT_RETURN_IF_ERROR(check_event(event, "event"));
    ZRT_RETURN_IF_ERROR(check_same_comm(stream, event));
    return stream->impl->wait_event(*event->impl);
  });
}

zrt_status_t zrt_event_create(zrt_comm_t comm, zrt_event_t* event) {
  ZRT_API_BODY("zrt_event_create", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    ZRT_RETURN_IF_ERROR(check_not_null(event, "event"));
    zrt::Event* impl = nullptr;
    ZRT_RETURN_IF_ERROR(comm->impl->engine().create_event(&impl));
    auto handle = std::make_unique<zrt_event>();
    handle->comm = comm;
    handle->impl = impl;
    zrt_event* raw = handle.get();
    {
      std::lock_guard<std::mutex> lock(comm->handles_mutex);
      comm->events.push_back(std::move(handle));
    }
    *event = raw;
    return Status::ok();
  });
}

zrt_status_t zrt_event_destroy(zrt_event_t event) {
  ZRT_API_BODY("zrt_event_destroy", {
    ZRT_RETURN_IF_ERROR(check_event(event, "event"));
    zrt_comm* comm = event->comm;
    Status status;
    if (event->owned != nullptr) {
      // A host stream may hold a wait on this event (ForeignEventWaitTask polls it): drain the
      // streams first so that no wait outlives the event. Their errors stay with the streams.
      std::vector<zrt::Stream*> streams{comm->default_stream.impl};
      {
        std::lock_guard<std::mutex> lock(comm->handles_mutex);
        for (const auto& handle : comm->streams) streams.push_back(handle->impl);
      }
      for (zrt::Stream* drained : streams) (void)drained->synchronize();
      event->owned.reset();
    } else {
      status = comm->impl->engine().destroy_event(event->impl);
    }
    std::lock_guard<std::mutex> lock(comm->handles_mutex);
    forget_handle(comm->events, event);
    return status;
  });
}

zrt_status_t zrt_event_record(zrt_event_t event, zrt_stream_t stream) {
  ZRT_API_BODY("zrt_event_record", {
    ZRT_RETURN_IF_ERROR(check_event(event, "event"));
    zrt::Stream* target = nullptr;
    ZRT_RETURN_IF_ERROR(zrt::api::resolve_stream(event->comm, stream, "stream", &target));
    return event->impl->record(*target);
  });
}

zrt_status_t zrt_event_query(zrt_event_t event) {
  ZRT_API_BODY("zrt_event_query", {
    ZRT_RETURN_IF_ERROR(check_event(event, "event"));
    return event->impl->query();
  });
}

zrt_status_t zrt_event_synchronize(zrt_event_t event) {
  ZRT_API_BODY("zrt_event_synchronize", {
    ZRT_RETURN_IF_ERROR(check_event(event, "event"));
    return event->impl->synchronize();
  });
}

}  // extern "C"
