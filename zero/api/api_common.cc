#include "zero/api/api_common.h"

#include <string>

#include "lib/core/callback_status.h"
#include "lib/core/dtype.h"
#include "lib/core/log.h"

namespace zrt::api {
namespace {
thread_local std::string last_error;
}  // namespace

const char* last_error_cstr() {
  return last_error.c_str();
}

zrt_status_t finish(const char* function, const Status& status) {
  if (status.is_ok()) {
    last_error.clear();
    return ZRT_SUCCESS;
  }
  last_error = std::string(function) + ": " + status.message();
  ZRT_LOG_DEBUG("{} -> {}", last_error, zrt_status_string(status.code()));
  return status.code();
}

Status check_not_null(const void* pointer, const char* arg) {
  if (pointer == nullptr) return Status::invalid_argument("{} is NULL", arg);
  return Status::ok();
}

void note_thread_rank(const zrt_comm* comm) {
  if (comm != nullptr && comm->impl != nullptr) log_set_thread_rank(comm->impl->rank());
}

Status check_comm(const zrt_comm* comm, const char* arg) {
  if (comm == nullptr) return Status::invalid_argument("{} is NULL", arg);
  if (comm->magic != kCommMagic || comm->impl == nullptr) {
    return Status::invalid_argument("{} is not a live zrt_comm_t (destroyed or foreign pointer)",
                                    arg);
  }
  note_thread_rank(comm);
  return Status::ok();
}

Status check_stream(const zrt_stream* stream, const char* arg) {
  if (stream == nullptr) {
    // Collectives take NULL for the default stream (resolve_stream); calls on a stream do not.
    return Status::invalid_argument(
        "{} is NULL: pass a stream made by zrt_stream_create (only collective and partition "
        "calls take NULL, for the communicator's default stream)",
        arg);
  }
  if (stream->magic != kStreamMagic || stream->impl == nullptr) {
    return Status::invalid_argument("{} is not a live zrt_stream_t", arg);
  }
  return Status::ok();
}

Status check_event(const zrt_event* event, const char* arg) {
  if (event == nullptr) return Status::invalid_argument("{} is NULL", arg);
  if (event->magic != kEventMagic || event->impl == nullptr) {
    return Status::invalid_argument("{} is not a live zrt_event_t", arg);
  }
  return Status::ok();
}

Status resolve_stream(zrt_comm* comm, zrt_stream* stream, const char* arg, zrt::Stream** out) {
  if (stream == nullptr) {
    *out = &comm->impl->default_stream();
    return Status::ok();
  }
  ZRT_RETURN_IF_ERROR(check_stream(stream, arg));
  if (stream->comm != comm) {
    return Status::invalid_argument("{} belongs to another communicator", arg);
  }
  *out = stream->impl;
  return Status::ok();
}

}  // namespace zrt::api

extern "C" {

const char* zrt_status_string(zrt_status_t status) {
  return zrt::status_code_name(static_cast<int>(status));
}

const char* zrt_last_error(void) {
  return zrt::api::last_error_cstr();
}

// Not ZRT_API_BODY: it must not clear or set the thread's last error (the callback runs inside
// another zrt call, whose error it is about to become).
zrt_status_t zrt_callback_error(const char* message) {
  try {
    zrt::set_callback_message(message != nullptr ? message : "");
  } catch (...) {
    // Out of memory for the message: the status alone still reports the failure.
  }
  return ZRT_CALLBACK_ERROR;
}

zrt_status_t zrt_get_version(int* version) {
  ZRT_API_BODY("zrt_get_version", {
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(version, "version"));
    *version = ZRT_VERSION_CODE;
    return zrt::Status::ok();
  });
}

zrt_status_t zrt_dtype_size(zrt_dtype_t dtype, size_t* bytes) {
  ZRT_API_BODY("zrt_dtype_size", {
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(bytes, "bytes"));
    ZRT_RETURN_IF_ERROR(zrt::check_dtype(dtype, "dtype"));
    *bytes = zrt::dtype_size(dtype);
    return zrt::Status::ok();
  });
}

}  // extern "C"
